"""What `tuner bench` prints and saves: vLLM's result table and its result JSON (same keys)."""

from __future__ import annotations

import math
from datetime import datetime
from typing import TYPE_CHECKING

from tuner.spec.metric_keys import (
    PREFIX_CACHE_HIT_RATE,
    latency_key,
    parse_latency_key,
    percentile_key,
    percentile_word,
)

if TYPE_CHECKING:
    from tuner.spec.workload import WorkloadSpec
    from tuner.workload.benchmark import BenchmarkResult

_HEADERS = {
    "ttft": ("TTFT", "Time to First Token"),
    "tpot": ("TPOT", "Time per Output Token (excl. 1st token)"),
    "itl": ("ITL", "Inter-token Latency"),
    "e2el": ("E2EL", "End-to-end Latency"),
}
_CI_LABELS = {
    "request_throughput": "Request throughput (req/s):",
    "output_throughput": "Output token throughput (tok/s):",
}
# vLLM drops these per-request lists from the saved JSON unless --save-detailed.
_DETAILED = (
    "input_lens",
    "output_lens",
    "ttfts",
    "itls",
    "start_times",
    "generated_texts",
    "errors",
)


def _line(label: str, value: object, fmt: str = "") -> str:
    return f"{label:<40} {value:<10{fmt}}"


def format_result(result: BenchmarkResult, spec: WorkloadSpec) -> str:
    """The table `vllm bench serve` prints, then the bootstrap confidence intervals."""
    m = result.metrics
    lines = []
    failed = [r.error for r in result.records if not r.success]
    if failed:
        lines.append("Failed requests during benchmark run detected (capping to 10):")
        lines += [f"Error {i}: {err}" for i, err in enumerate(failed[:10])]
    lines.append(f"{' Serving Benchmark Result ':=^50}")
    lines.append(_line("Successful requests:", m["completed"]))
    lines.append(_line("Failed requests:", m["failed"]))
    if spec.max_concurrency is not None:
        lines.append(_line("Maximum request concurrency:", spec.max_concurrency))
    if not math.isinf(spec.request_rate):
        lines.append(_line("Request rate configured (RPS):", spec.request_rate, ".2f"))
    lines.append(_line("Benchmark duration (s):", m["duration"], ".2f"))
    lines.append(_line("Total input tokens:", m["total_input_tokens"]))
    lines.append(_line("Total generated tokens:", m["total_output_tokens"]))
    lines.append(_line("Request throughput (req/s):", m["request_throughput"], ".2f"))
    if "request_goodput" in m:
        lines.append(_line("Request goodput (req/s):", m["request_goodput"], ".2f"))
    lines.append(_line("Output token throughput (tok/s):", m["output_throughput"], ".2f"))
    lines.append(
        _line("Peak output token throughput (tok/s):", m["max_output_tokens_per_s"], ".2f")
    )
    lines.append(_line("Peak concurrent requests:", m["max_concurrent_requests"], ".2f"))
    lines.append(_line("Total token throughput (tok/s):", m["total_token_throughput"], ".2f"))
    if PREFIX_CACHE_HIT_RATE in m:  # the engine's counters, not vLLM bench's own table
        lines.append(_line("Prefix cache hit rate (%):", 100 * m[PREFIX_CACHE_HIT_RATE], ".2f"))
    for name, (short, header) in _HEADERS.items():
        if name not in spec.selected_metrics:
            continue
        lines.append(f"{header:-^50}")
        lines.append(_line(f"Mean {short} (ms):", m[latency_key("mean", name)], ".2f"))
        lines.append(_line(f"Median {short} (ms):", m[latency_key("median", name)], ".2f"))
        for p in spec.percentiles:
            label = f"P{percentile_word(p)} {short} (ms):"
            lines.append(_line(label, m[percentile_key(p, name)], ".2f"))
    if result.ci:
        lines.append(f"{' Bootstrap 95% CI (requests resampled) ':-^50}")
        for key, (lo, hi) in result.ci.items():
            lines.append(_line(_ci_label(key), f"[{lo:.2f}, {hi:.2f}]"))
    lines.append("=" * 50)
    return "\n".join(lines)


def _ci_label(key: str) -> str:
    if key in _CI_LABELS:
        return _CI_LABELS[key]
    parsed = parse_latency_key(key)
    if parsed is None:
        return f"{key}:"
    stat = parsed.statistic
    stat = stat.upper() if parsed.percentile is not None else stat.capitalize()
    return f"{stat} {_HEADERS[parsed.metric][0]} (ms):"


def result_json(
    result: BenchmarkResult,
    spec: WorkloadSpec,
    *,
    model: str,
    tokenizer_id: str,
    detailed: bool = False,
) -> dict[str, object]:
    """vLLM's saved result (same keys and order), plus `<metric>_ci: [lo, hi]`."""
    backend = "openai-chat" if spec.endpoint == "/v1/chat/completions" else "openai"
    m = result.metrics
    head_keys = ("duration", "completed", "failed", "total_input_tokens", "total_output_tokens")
    data: dict[str, object] = {
        "date": datetime.now().strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": backend,
        "backend": backend,
        "label": None,
        "model_id": model,
        "tokenizer_id": tokenizer_id,
        "num_prompts": spec.num_prompts,
        "request_rate": "inf" if math.isinf(spec.request_rate) else spec.request_rate,
        "burstiness": spec.burstiness,
        "max_concurrency": spec.max_concurrency,
        **{k: m[k] for k in head_keys},
        "request_throughput": m["request_throughput"],
        "request_goodput": m.get("request_goodput"),
        "output_throughput": m["output_throughput"],
        "total_token_throughput": m["total_token_throughput"],
    }
    recs = result.records
    if detailed:
        per_request = (
            [r.prompt_len for r in recs],
            [r.output_tokens if r.success else 0 for r in recs],
            [r.ttft_s for r in recs],
            [r.itl_s for r in recs],
            [r.start_s for r in recs],
            [r.generated_text for r in recs],
            [r.error for r in recs],
        )
        data.update(zip(_DETAILED, per_request, strict=True))
    data.update({k: v for k, v in m.items() if k not in data})
    data.update({f"{k}_ci": [lo, hi] for k, (lo, hi) in result.ci.items()})
    return data

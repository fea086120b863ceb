"""`tuner bench`: one workload against a running server, reported like `vllm bench serve`.

Flag names are vLLM's, so switching is one word. Heavy imports stay inside `bench()`.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tuner.commands.bench_output import format_result, result_json
from tuner.errors import UserError
from tuner.spec.metric_keys import GoodputMetric, goodput_metric
from tuner.spec.outputs import check_output_file, write_output_file

if TYPE_CHECKING:
    from tuner.spec.workload import WorkloadSpec
    from tuner.workload.benchmark import BenchmarkResult

BACKEND_ENDPOINTS = {
    "vllm": "/v1/completions",
    "openai": "/v1/completions",
    "openai-chat": "/v1/chat/completions",
}
Opt = typer.Option


def bench(
    base_url: Annotated[
        str | None, Opt("--base-url", "--base_url", help="Server URL, e.g. http://127.0.0.1:8000.")
    ] = None,
    host: Annotated[str, Opt(help="Used when --base-url is not given.")] = "127.0.0.1",
    port: Annotated[int, Opt(min=1, max=65535, help="Used when --base-url is not given.")] = 8000,
    backend: Annotated[
        str, Opt("--backend", "--endpoint-type", help="vllm, openai or openai-chat.")
    ] = "vllm",
    endpoint: Annotated[
        str | None, Opt(help="/v1/completions or /v1/chat/completions (default: by backend).")
    ] = None,
    model: Annotated[
        str | None, Opt(help="Model name to request (default: the server's first).")
    ] = None,
    tokenizer: Annotated[
        str | None, Opt(help="Local tokenizer directory (default: --model, if a directory).")
    ] = None,
    dataset_name: Annotated[str, Opt(help="random, sharegpt, jsonl or longdoc.")] = "random",
    dataset_path: Annotated[str | None, Opt(help="ShareGPT JSON or JSONL file.")] = None,
    random_input_len: Annotated[int, Opt(help="Prompt tokens of the random dataset.")] = 1024,
    random_output_len: Annotated[int, Opt(help="Output tokens of the random dataset.")] = 128,
    random_range_ratio: Annotated[float, Opt(help="Length range: len*(1±r).")] = 0.0,
    sharegpt_output_len: Annotated[int | None, Opt(help="Fixed ShareGPT output length.")] = None,
    longdoc_lengths: Annotated[
        str | None, Opt(help="Prompt tokens of the documents [default: 512,2048,8192,32768].")
    ] = None,
    longdoc_weights: Annotated[
        str | None, Opt(help="Share of each length, a comma list (default: equal).")
    ] = None,
    longdoc_output_len: Annotated[int, Opt(help="Output tokens of each long document.")] = 1024,
    longdoc_questions: Annotated[
        str, Opt(help="Questions per document, drawn from a comma list (docs/datasets.md).")
    ] = "1",
    longdoc_system_len: Annotated[int, Opt(help="Tokens of a system prompt all share.")] = 0,
    longdoc_order: Annotated[
        str, Opt(help="burst (a document's questions together) or spread.")
    ] = "burst",
    num_prompts: Annotated[int, Opt(help="Requests to measure.")] = 1000,
    request_rate: Annotated[float, Opt(help="Requests/s, or inf for all at once.")] = math.inf,
    burstiness: Annotated[float, Opt(help="Gamma shape of arrivals; 1 = Poisson.")] = 1.0,
    max_concurrency: Annotated[int | None, Opt(help="Most requests in flight.")] = None,
    seed: Annotated[int, Opt(help="Seed of the dataset and the arrival times.")] = 0,
    percentile_metrics: Annotated[
        str, Opt(help="Comma list of ttft,tpot,itl,e2el to report.")
    ] = "ttft,tpot,itl",
    metric_percentiles: Annotated[str, Opt(help="Comma list of percentiles, e.g. 95,99.")] = "99",
    goodput: Annotated[
        list[str] | None, Opt(help="SLOs for goodput: ttft:MS tpot:MS e2el:MS.")
    ] = None,
    num_warmups: Annotated[int, Opt(help="Unmeasured warm-up requests.")] = 0,
    ignore_eos: Annotated[bool, Opt(help="Ask for ignore_eos (always on for random).")] = False,
    request_timeout: Annotated[float, Opt(help="Seconds before one request fails.")] = 600.0,
    save_result: Annotated[
        Path | None, Opt(help="Write the result JSON (vLLM's keys) here.")
    ] = None,
    save_detailed: Annotated[bool, Opt(help="Also save per-request lists.")] = False,
    force: Annotated[bool, Opt(help="Replace an existing --save-result file.")] = False,
    api_key: Annotated[
        str | None, Opt(envvar="OPENAI_API_KEY", show_envvar=False, help="Bearer token.")
    ] = None,
    extra: Annotated[list[str] | None, typer.Argument(hidden=True)] = None,
) -> None:
    """Run one fixed workload against a running server and print vLLM's result table."""
    spec = _workload(dict(locals()))  # every flag by name: no other local exists yet
    url = (base_url or f"http://{host}:{port}").rstrip("/")
    tokenizer_id = tokenizer or (model if model and Path(model).is_dir() else None)
    if tokenizer_id is None:
        raise UserError("--tokenizer DIR is required (a local tokenizer directory)")
    result, model = _measure(spec, url, model, tokenizer_id, api_key)
    print(format_result(result, spec))
    if save_result is not None:
        data = result_json(
            result, spec, model=model, tokenizer_id=tokenizer_id, detailed=save_detailed
        )
        write_output_file(save_result, _json_text(data), "--save-result", force=force)
    if result.metrics["completed"] == 0:
        first_error = next((r.error for r in result.records if r.error), "")
        print(f"tuner: error: all requests failed; first error: {first_error}", file=sys.stderr)
        raise typer.Exit(1)


def _json_text(data: Mapping[str, object]) -> str:
    return json.dumps(data, indent=2) + "\n"


# The flags of `tuner bench` that are WorkloadSpec fields of the same name.
_WORKLOAD_FLAGS = (
    "dataset_name",
    "dataset_path",
    "random_input_len",
    "random_output_len",
    "random_range_ratio",
    "sharegpt_output_len",
    "longdoc_weights",
    "longdoc_output_len",
    "longdoc_questions",
    "longdoc_system_len",
    "longdoc_order",
    "num_prompts",
    "request_rate",
    "burstiness",
    "max_concurrency",
    "seed",
    "num_warmups",
    "percentile_metrics",
    "metric_percentiles",
    "ignore_eos",
)


def _workload(flags: dict[str, Any]) -> WorkloadSpec:  # `locals()` of the command
    """The workload `tuner bench`'s flags (by name) describe; a bad one is a UserError."""
    backend, goodput, longdoc = flags["backend"], flags["goodput"], flags["longdoc_lengths"]
    if backend not in BACKEND_ENDPOINTS:
        raise UserError(f"--backend must be one of {', '.join(BACKEND_ENDPOINTS)}, got {backend!r}")
    if flags["save_result"] is not None:
        # before the benchmark, not after
        check_output_file(flags["save_result"], "--save-result", force=flags["force"])
    goodput_ms = parse_goodput((goodput or []) + _goodput_extras(flags["extra"], bool(goodput)))
    if flags["dataset_name"] in ("random", "longdoc") and flags["dataset_path"]:
        raise UserError(
            f"--dataset-path cannot be used with --dataset-name {flags['dataset_name']}"
        )
    return workload_spec(
        endpoint=flags["endpoint"] or BACKEND_ENDPOINTS[backend],
        **{name: flags[name] for name in _WORKLOAD_FLAGS},
        **({} if longdoc is None else {"longdoc_lengths": longdoc}),
        goodput=goodput_ms,
        request_timeout_s=flags["request_timeout"],
    )


def _measure(
    spec: WorkloadSpec, url: str, model: str | None, tokenizer_id: str, api_key: str | None
) -> tuple[BenchmarkResult, str]:
    """Build the requests, check the server, run the workload: the result and the model."""
    from tuner.workload.benchmark import BenchmarkAborted, run_benchmark
    from tuner.workload.datasets import build_requests
    from tuner.workload.lengths import check_longest_fits
    from tuner.workload.probe import model_to_request, served_max_model_len, server_model_cards
    from tuner.workload.tokenizer import load_tokenizer

    tok = load_tokenizer(tokenizer_id)
    requests = build_requests(spec, tok)
    cards = server_model_cards(url, api_key)
    model = model_to_request(url, model, cards)
    if cards is None:
        print(
            f"tuner: warning: {url}/v1/models gives no model list; "
            f"requesting model {model!r} unchecked",
            file=sys.stderr,
        )
    limit = served_max_model_len(cards, model)
    if limit is not None and spec.dataset_name == "longdoc":  # random: as vLLM, let them fail
        check_longest_fits(spec, limit, f"{url} serves max-model-len {limit}: ")

    distribution = "Poisson process" if spec.burstiness == 1.0 else "Gamma distribution"
    print(f"Traffic request rate: {spec.request_rate}")
    print(f"Burstiness factor: {spec.burstiness} ({distribution})")
    print(f"Maximum request concurrency: {spec.max_concurrency}")
    try:
        result = run_benchmark(
            spec, url, model, requests, api_key=api_key, on_progress=_progress(), tokenizer=tok
        )
    except BenchmarkAborted as exc:
        print(f"tuner: error: benchmark aborted: {exc.reason}", file=sys.stderr)
        raise typer.Exit(1) from None
    return result, model


def workload_spec(**fields: object) -> WorkloadSpec:
    """A WorkloadSpec from CLI values; a rejected value is one UserError naming the flag."""
    from pydantic import ValidationError

    from tuner.spec.parsing import describe_validation_error
    from tuner.spec.workload import WorkloadSpec

    try:  # WorkloadSpec's validators check --percentile-metrics and --metric-percentiles
        return WorkloadSpec.model_validate(fields)
    except ValidationError as exc:
        raise UserError(describe_validation_error(exc, as_flag=True)) from None


def parse_goodput(pairs: list[str]) -> dict[GoodputMetric, float] | None:
    """`ttft:500 tpot:50` (separate or in one value) -> {"ttft": 500.0, "tpot": 50.0}."""
    out: dict[GoodputMetric, float] = {}
    for item in (p for value in pairs for p in value.replace(",", " ").split()):
        name, sep, raw = item.partition(":")
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        metric = goodput_metric(name)
        if not sep or metric is None or not value >= 0:
            raise UserError(
                f"--goodput: bad SLO {item!r}: use ttft:MS, tpot:MS or e2el:MS (ms, >= 0)"
            )
        out[metric] = value
    return out or None


def _goodput_extras(extra: list[str] | None, goodput_given: bool) -> list[str]:
    """vLLM takes `--goodput ttft:500 tpot:50`; click leaves `tpot:50` as a stray argument."""
    for arg in extra or []:
        if not goodput_given or not arg.startswith(("ttft:", "tpot:", "e2el:")):
            raise UserError(f"unexpected argument {arg!r}")
    return list(extra or [])


def _progress() -> Callable[[int, int], None] | None:
    if not sys.stderr.isatty():
        return None

    def show(done: int, total: int) -> None:
        end = "\n" if done == total else ""
        print(f"\r{done}/{total} requests", end=end, file=sys.stderr, flush=True)

    return show

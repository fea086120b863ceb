"""The workload options, shared by `tuner bench` and study files (vLLM's flag names)."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import (
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from tuner.spec.inputs import MAX_TIMEOUT_S, NoBoolNumbers
from tuner.spec.metric_keys import (
    LATENCY_METRICS,
    GoodputMetric,
    parse_latency_key,
    percentile_word,
)

# Caps on sizes, so that a typo cannot exhaust memory (docs/study-file.md, "Limits").
MAX_PROMPTS = 1_000_000
MAX_LEN = 2**20  # tokens of one prompt or output: above every model's max position
MAX_RANDOM_TOKENS = 2**28  # random prompts in all (about 1 GB of prompt text)
MAX_WARMUPS = 10_000
SEED_LIMIT = 2**32  # numpy's and Optuna's samplers take seeds in [0, 2**32)
# The seed's long-document QA case (issue 13): prompt tokens, and the output of each.
LONGDOC_LENGTHS = (512, 2048, 8192, 32768)
LONGDOC_OUTPUT_LEN = 1024


class WorkloadSpec(NoBoolNumbers):
    """One fixed workload. Field names are `vllm bench serve` flags with `_` for `-`."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    endpoint: Literal["/v1/completions", "/v1/chat/completions"] = "/v1/completions"
    dataset_name: Literal["random", "sharegpt", "jsonl", "longdoc"] = "random"
    dataset_path: str | None = None
    tokenizer: str | None = None
    random_input_len: int = Field(1024, ge=1, le=MAX_LEN)
    random_output_len: int = Field(128, ge=1, le=MAX_LEN)
    random_range_ratio: float = Field(0.0, ge=0.0, lt=1.0)
    sharegpt_output_len: int | None = Field(None, ge=1, le=MAX_LEN)
    longdoc_lengths: list[int] = Field(default_factory=lambda: list(LONGDOC_LENGTHS))
    longdoc_weights: list[float] | None = None
    longdoc_output_len: int = Field(LONGDOC_OUTPUT_LEN, ge=1, le=MAX_LEN)
    # Documents asked several times (docs/datasets.md): each document's number of questions
    # is drawn from this list; a system prompt every request shares; burst or spread order.
    longdoc_questions: list[int] = Field(default_factory=lambda: [1])
    longdoc_system_len: int = Field(0, ge=0, le=MAX_LEN)
    longdoc_order: Literal["burst", "spread"] = "burst"
    num_prompts: int = Field(1000, ge=1, le=MAX_PROMPTS)
    request_rate: float = Field(math.inf, allow_inf_nan=True)
    burstiness: float = Field(1.0, gt=0.0)
    max_concurrency: int | None = Field(None, ge=1, le=MAX_PROMPTS)
    seed: int = Field(0, ge=0, lt=SEED_LIMIT)
    num_warmups: int = Field(0, ge=0, le=MAX_WARMUPS)
    percentile_metrics: str = "ttft,tpot,itl"
    metric_percentiles: str = "99"
    goodput: dict[GoodputMetric, float] | None = None
    ignore_eos: bool = False
    request_timeout_s: float = Field(600.0, gt=0.0, le=MAX_TIMEOUT_S)

    @field_validator("request_rate")
    @classmethod
    def _positive_rate(cls, v: float) -> float:
        if not v > 0:
            raise ValueError("request_rate must be > 0 (use inf to send everything at once)")
        return v

    @field_validator("longdoc_lengths", mode="before")
    @classmethod
    def _lengths(cls, v: object) -> list[int]:
        items = _items(v) if isinstance(v, str) else v
        if not isinstance(items, list | tuple) or not items:
            raise ValueError("give prompt lengths in tokens, e.g. 512,2048,8192,32768")
        out = []
        for item in items:
            try:
                n = item if isinstance(item, int) and not isinstance(item, bool) else int(item)
            except (TypeError, ValueError):
                raise ValueError(f"{item!r} is not a whole number of tokens") from None
            if isinstance(item, float | bool) or not 1 <= n <= MAX_LEN:
                raise ValueError(f"{item!r} must be a whole number of tokens, 1 to {MAX_LEN}")
            out.append(n)
        return out

    @field_validator("longdoc_questions", mode="before")
    @classmethod
    def _questions(cls, v: object) -> object:
        items = _items(v) if isinstance(v, str) else [v] if isinstance(v, int) else v
        if not isinstance(items, list | tuple) or not items:
            raise ValueError("give questions per document, e.g. 4 or 1,4,8")
        for item in items:
            n = int(item) if isinstance(item, str) and item.strip().isdigit() else item
            if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 1000:
                raise ValueError(f"{item!r} must be a whole number of questions, 1 to 1000")
        return [int(i) for i in items]

    @property
    def longdoc_shared(self) -> bool:
        """Long documents asked several times, or a shared system prompt: prompts that share
        prefixes (`tuner.workload.longdoc.shared_longdoc_prompts`)."""
        return self.longdoc_questions != [1] or self.longdoc_system_len > 0

    @field_validator("longdoc_weights", mode="before")
    @classmethod
    def _weights(cls, v: object) -> object:
        return _items(v) if isinstance(v, str) else v

    @field_validator("longdoc_weights")
    @classmethod
    def _positive_weights(cls, v: list[float] | None, info: ValidationInfo) -> list[float] | None:
        if v is None:
            return v
        if not all(w > 0 for w in v):
            raise ValueError("each weight must be > 0")
        lengths = info.data.get("longdoc_lengths")
        if lengths is not None and len(v) != len(lengths):
            raise ValueError(f"{len(v)} weights for {len(lengths)} lengths: give one per length")
        return v

    @field_validator("percentile_metrics")
    @classmethod
    def _metrics(cls, v: str) -> str:
        names = _items(v)
        unknown = [n for n in names if n not in LATENCY_METRICS]
        if unknown or not names:
            raise ValueError(
                f"unknown metric {', '.join(unknown)!r}; use ttft, tpot, itl, e2el"
                if unknown
                else "name at least one of ttft, tpot, itl, e2el"
            )
        return v

    @field_validator("metric_percentiles")
    @classmethod
    def _percentiles(cls, v: str) -> str:
        items = _items(v)
        if not items:
            raise ValueError("give at least one percentile, e.g. 99")
        for item in items:
            try:
                p = float(item)
            except ValueError:
                raise ValueError(f"{item!r} is not a number: use e.g. 95,99") from None
            if not 0 <= p <= 100:  # NaN fails too
                raise ValueError(f"percentile {item} is outside 0..100")
        return v

    @field_validator("goodput")
    @classmethod
    def _goodput(cls, v: dict[GoodputMetric, float] | None) -> dict[GoodputMetric, float] | None:
        for name, ms in (v or {}).items():
            if not ms >= 0:
                raise ValueError(f"goodput {name}: the limit must be >= 0 ms")
        return v

    @field_validator("dataset_path", "tokenizer")
    @classmethod
    def _no_nul(cls, v: str | None) -> str | None:
        if v is not None and "\0" in v:
            raise ValueError("contains a NUL character")
        return v

    @model_validator(mode="after")
    def _dataset_path_needed(self) -> WorkloadSpec:
        if self.dataset_name in ("sharegpt", "jsonl") and not self.dataset_path:
            raise ValueError(f"dataset_name {self.dataset_name} needs dataset_path")
        if self.dataset_name == "longdoc":
            total = self.num_prompts * max(self.longdoc_lengths)
            if total > MAX_RANDOM_TOKENS:
                raise ValueError(
                    f"num_prompts × the longest longdoc length is up to {total} prompt "
                    f"tokens: at most {MAX_RANDOM_TOKENS} (2**28) fit in memory"
                )
        if self.dataset_name == "random":
            total = self.num_prompts * math.ceil(
                self.random_input_len * (1 + self.random_range_ratio)
            )
            if total > MAX_RANDOM_TOKENS:
                raise ValueError(
                    f"num_prompts × random_input_len is up to {total} prompt tokens: "
                    f"at most {MAX_RANDOM_TOKENS} (2**28) fit in memory"
                )
        return self

    @property
    def longest_request(self) -> int | None:
        """Prompt plus output tokens of the longest request the dataset can hold, when the
        spec alone says (random and longdoc), else None (read from a file)."""
        if self.dataset_name == "random":
            r = self.random_range_ratio
            return math.ceil(self.random_input_len * (1 + r)) + math.ceil(
                self.random_output_len * (1 + r)
            )
        if self.dataset_name == "longdoc":
            return max(self.longdoc_lengths) + self.longdoc_output_len
        return None

    @property
    def percentiles(self) -> list[float]:
        return [float(p) for p in _items(self.metric_percentiles)]

    @property
    def selected_metrics(self) -> list[str]:
        return _items(self.percentile_metrics)


def _items(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def check_measured(spec: WorkloadSpec, metric: str) -> str | None:
    """Why this workload never produces `metric` (a result key), or None when it does."""
    key = parse_latency_key(metric)
    if key is not None:
        if key.metric not in spec.selected_metrics:
            return f"{metric} is not measured: workload.percentile_metrics lacks {key.metric}"
        written = key.statistic.removeprefix("p")  # the percentile as the key writes it
        if key.percentile is not None and written not in map(percentile_word, spec.percentiles):
            return f"{metric} is not measured: workload.metric_percentiles lacks {written}"
    if metric == "request_goodput" and not spec.goodput:
        return "request_goodput is not measured: the workload sets no goodput"
    return None

"""The workload options, shared by `tuner bench` and study files (vLLM's flag names)."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class WorkloadSpec(BaseModel):
    """One fixed workload. Field names are `vllm bench serve` flags with `_` for `-`."""

    model_config = ConfigDict(extra="forbid")

    endpoint: Literal["/v1/completions", "/v1/chat/completions"] = "/v1/completions"
    dataset_name: Literal["random", "sharegpt", "jsonl"] = "random"
    dataset_path: str | None = None
    tokenizer: str | None = None
    random_input_len: int = Field(1024, ge=1)
    random_output_len: int = Field(128, ge=1)
    random_range_ratio: float = Field(0.0, ge=0.0, lt=1.0)
    sharegpt_output_len: int | None = Field(None, ge=1)
    num_prompts: int = Field(1000, ge=1)
    request_rate: float = math.inf
    burstiness: float = Field(1.0, gt=0.0)
    max_concurrency: int | None = Field(None, ge=1)
    seed: int = 0
    num_warmups: int = Field(0, ge=0)
    percentile_metrics: str = "ttft,tpot,itl"
    metric_percentiles: str = "99"
    goodput: dict[Literal["ttft", "tpot", "e2el"], float] | None = None
    ignore_eos: bool = False
    request_timeout_s: float = Field(600.0, gt=0.0)

    @field_validator("request_rate")
    @classmethod
    def _positive_rate(cls, v: float) -> float:
        if not v > 0:
            raise ValueError("request_rate must be > 0 (use inf to send everything at once)")
        return v

    @model_validator(mode="after")
    def _dataset_path_needed(self) -> WorkloadSpec:
        if self.dataset_name in ("sharegpt", "jsonl") and not self.dataset_path:
            raise ValueError(f"dataset_name {self.dataset_name} needs dataset_path")
        return self

    @property
    def percentiles(self) -> list[float]:
        return [float(p) for p in self.metric_percentiles.split(",") if p.strip()]

    @property
    def selected_metrics(self) -> list[str]:
        return [m.strip() for m in self.percentile_metrics.split(",") if m.strip()]

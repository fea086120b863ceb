"""The user's request log against the study's workload (`tuner verify --request-log`): the
prompt and output lengths of each, in lines, and what in the log is outside the study's range
(`changes.traffic_change`). What the simulator predicts for it is `tuner.verify.predict`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tuner.errors import UserError
from tuner.spec.workload import MAX_PROMPTS, WorkloadSpec
from tuner.verify.changes import traffic_change
from tuner.verify.predict import TrafficPrediction
from tuner.workload.client import CHAT_ENDPOINT
from tuner.workload.datasets import build_requests, jsonl_requests
from tuner.workload.request import BenchRequest
from tuner.workload.tokenizer import HFTokenizer


@dataclass(frozen=True)
class Traffic:
    """The user's request log against the study's workload (`traffic`)."""

    lines: list[str] = field(default_factory=list)  # the lengths, figures
    changed: list[str] = field(default_factory=list)  # what is outside the study's range
    studied: list[BenchRequest] = field(default_factory=list)  # the study's requests
    logged: list[BenchRequest] = field(default_factory=list)  # the log's
    predicted: TrafficPrediction | None = None  # SIMULATED, when `changed`


def traffic(workload: WorkloadSpec, log: Path | None, tok: HFTokenizer) -> Traffic:
    """The user's request log (JSONL, as `tuner bench` takes it; its first MAX_PROMPTS lines)
    against the study's workload: lines of figures, and the phrases of what is outside the
    study's range (`changes.traffic_change`)."""
    if log is None:
        return Traffic()
    chat = workload.endpoint == CHAT_ENDPOINT
    logged = jsonl_requests(str(log), tok, _log_size(log), chat=chat)
    studied = build_requests(workload, tok)
    lines, changed = [], []
    for what, of in (("prompt", _prompt_lens), ("output", _output_lens)):
        line, change = traffic_change(what, of(studied), of(logged))
        lines += [line] if line else []
        changed += [change] if change else []
    return Traffic(lines, changed, studied, logged)


def _log_size(log: Path) -> int:
    try:
        text = log.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"--request-log {log}: cannot read it: {exc}") from None
    return max(1, min(MAX_PROMPTS, sum(1 for line in text.splitlines() if line.strip())))


def _prompt_lens(requests: Sequence[BenchRequest]) -> list[int]:
    return [r.prompt_len for r in requests]


def _output_lens(requests: Sequence[BenchRequest]) -> list[int]:
    return [r.output_len for r in requests if r.output_len is not None]

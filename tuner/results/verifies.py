"""The verify history as people read it: one row per stored `tuner verify` (the documents of
`tuner.store.verifies`), shared by `tuner verify --history`, `tuner trials` (its table and
JSON) and `tuner report` (docs/verify.md, "Records")."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TypedDict

from tuner.spec.figures import figure
from tuner.spec.metric_keys import HEADLINE_METRICS

VerifyDoc = Mapping[str, object]  # one stored verify's JSON document, as read back


class VerifyRow(TypedDict):
    """One stored verify as people read it (`verify_row`)."""

    verified_at: str
    trial: object
    base_url: object
    vllm_version: object
    figures: dict[str, object]
    predicted_for_your_traffic: object
    exit_code: object
    verdict: object


def verified_when(doc: VerifyDoc) -> str:
    """When the verify ended, in UTC."""
    at = doc["verified_at"]
    assert isinstance(at, int | float), at  # `time.time()` when it was stored
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))


def _object(value: object) -> Mapping[str, object]:
    """A JSON object of the document; absent (None) reads as empty."""
    return value if isinstance(value, Mapping) else {}


def verify_row(doc: VerifyDoc) -> VerifyRow:
    """One stored verify: time, trial, engine URL, vLLM version, measured headline figures
    (empty when it measured nothing), exit code, verdict."""
    measured = _object(doc.get("metrics"))
    predicted = _object(doc.get("predicted"))
    verdict = _object(doc["verdict"])
    return {
        "verified_at": verified_when(doc),
        "trial": doc.get("trial"),
        "base_url": doc["base_url"],
        "vllm_version": _object(doc.get("engine")).get("version"),
        "figures": {m: measured[m] for m in HEADLINE_METRICS if m in measured},
        "predicted_for_your_traffic": predicted.get("your_traffic") or None,  # SIMULATED
        "exit_code": verdict["exit_code"],
        "verdict": verdict["text"],
    }


def figures_words(figures: Mapping[str, object]) -> str:
    """`p99_ttft_ms 220.7, mean_tpot_ms 31.2, ...`; "nothing measured" for none."""
    return ", ".join(f"{m} {figure(v)}" for m, v in figures.items()) or "nothing measured"


def verify_cells(doc: VerifyDoc) -> tuple[object, ...]:
    """One stored verify as the cells people read (`verify_lines`, the report's table): time,
    trial, engine URL, vLLM version ("?" when not recorded), the figures measured, exit code,
    verdict."""
    row = verify_row(doc)
    return (
        row["verified_at"],
        row["trial"],
        row["base_url"],
        row["vllm_version"] or "?",
        figures_words(row["figures"]),
        row["exit_code"],
        row["verdict"],
    )


def verify_lines(docs: Sequence[VerifyDoc]) -> list[str]:
    """One line per stored verify, oldest first (`tuner verify --history`, `tuner trials`)."""
    line = "{}  trial {}  {}  vLLM {}  {}  exit {}  {}"
    return [line.format(*verify_cells(doc)) for doc in docs]


def with_verifies(
    rows: list[dict[str, object]], docs: Sequence[VerifyDoc]
) -> list[dict[str, object]]:
    """`tuner trials --format json`: each verified trial's row with its verifies (`verify_row`,
    oldest first) under "verifies"; the rows of trials never verified stay as they were."""
    by_trial: dict[object, list[VerifyRow]] = {}
    for doc in docs:
        by_trial.setdefault(doc.get("trial"), []).append(verify_row(doc))
    return [
        {**row, "verifies": by_trial[row["number"]]} if row.get("number") in by_trial else row
        for row in rows
    ]

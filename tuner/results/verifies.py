"""The verify history as people read it: one row per stored `tuner verify` (the documents of
`tuner.store.verifies`), shared by `tuner verify --history`, `tuner trials` (its table and
JSON) and `tuner report` (docs/verify.md, "Records")."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from tuner.spec.figures import figure
from tuner.spec.metric_keys import HEADLINE_METRICS


def verified_when(doc: dict[str, Any]) -> str:
    """When the verify ended, in UTC."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(doc["verified_at"]))


def verify_row(doc: dict[str, Any]) -> dict[str, Any]:
    """One stored verify: time, trial, engine URL, vLLM version, measured headline figures
    (empty when it measured nothing), exit code, verdict."""
    measured = doc.get("metrics") or {}
    predicted = doc.get("predicted") or {}
    return {
        "verified_at": verified_when(doc),
        "trial": doc.get("trial"),
        "base_url": doc["base_url"],
        "vllm_version": (doc.get("engine") or {}).get("version"),
        "figures": {m: measured[m] for m in HEADLINE_METRICS if m in measured},
        "predicted_for_your_traffic": predicted.get("your_traffic") or None,  # SIMULATED
        "exit_code": doc["verdict"]["exit_code"],
        "verdict": doc["verdict"]["text"],
    }


def figures_words(figures: dict[str, Any]) -> str:
    """`p99_ttft_ms 220.7, mean_tpot_ms 31.2, ...`; "nothing measured" for none."""
    return ", ".join(f"{m} {figure(v)}" for m, v in figures.items()) or "nothing measured"


def verify_lines(docs: Sequence[dict[str, Any]]) -> list[str]:
    """One line per stored verify, oldest first (`tuner verify --history`, `tuner trials`)."""
    out = []
    for row in map(verify_row, docs):
        out.append(
            f"{row['verified_at']}  trial {row['trial']}  {row['base_url']}  "
            f"vLLM {row['vllm_version'] or '?'}  {figures_words(row['figures'])}  "
            f"exit {row['exit_code']}  {row['verdict']}"
        )
    return out


def with_verifies(
    rows: list[dict[str, Any]], docs: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """`tuner trials --format json`: each verified trial's row with its verifies (`verify_row`,
    oldest first) under "verifies"; the rows of trials never verified stay as they were."""
    by_trial: dict[Any, list[dict[str, Any]]] = {}
    for doc in docs:
        by_trial.setdefault(doc.get("trial"), []).append(verify_row(doc))
    return [
        {**row, "verifies": by_trial[row["number"]]} if row.get("number") in by_trial else row
        for row in rows
    ]

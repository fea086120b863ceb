"""`tuner run` against a server that streams no `usage`: output tokens come from the text.

`tuner sim serve --fault-no-usage` never sends the usage chunk; the runner must then
re-count each request's output tokens with the workload's tokenizer, as `tuner bench` and
`vllm bench serve` do, so that the stored totals and TPOT equal those of a run with usage.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import optuna
import pytest

from tuner.sim.text import TokenText
from tuner.workload.tokenizer import load_tokenizer
from tuner_testing import sim_study, tuner

pytestmark = pytest.mark.slow  # whole studies: `make test`, not `make test-fast`

PROMPTS, OUTPUT_LEN = 16, 16


def _run_one(tmp_path: Path, tokenizer: Path, flags: dict) -> tuple[dict, list[tuple]]:
    study = sim_study(tmp_path, tokenizer, flags=flags)
    run = tuner("run", str(study), "--n-trials", "1", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    storage = f"sqlite:///{tmp_path}/tuner.db"
    (trial,) = optuna.load_study(study_name="e2e", storage=storage).trials
    with sqlite3.connect(tmp_path / "tuner.db") as db:
        rows = db.execute(
            "SELECT output_tokens, ttft_s, latency_s, success FROM tuner_requests"
            " WHERE trial_number = ? ORDER BY idx",
            (trial.number,),
        ).fetchall()
    return trial.user_attrs, rows


def test_output_tokens_are_recounted_from_the_text(tmp_path: Path, tiny_model_dir) -> None:
    # What the sim streams for one request, re-tokenized as the client does it.
    tok = load_tokenizer(str(tiny_model_dir))
    text = "".join(TokenText(tok).token(i) for i in range(OUTPUT_LEN))
    per_request = len(tok(text, add_special_tokens=False).input_ids)
    assert per_request == OUTPUT_LEN  # the sim's words re-tokenize one token each

    (tmp_path / "usage").mkdir()
    (tmp_path / "no-usage").mkdir()
    with_usage, _ = _run_one(tmp_path / "usage", tiny_model_dir, {})
    attrs, rows = _run_one(tmp_path / "no-usage", tiny_model_dir, {"fault-no-usage": True})

    assert "failure_kind" not in attrs, attrs
    assert attrs["completed"] == PROMPTS and attrs["failed"] == 0
    assert attrs["total_output_tokens"] == PROMPTS * per_request
    assert attrs["total_output_tokens"] == with_usage["total_output_tokens"]
    assert [r[0] for r in rows] == [per_request] * PROMPTS
    # Mean TPOT from the stored records: (E2EL - TTFT) / (output tokens - 1), in ms.
    tpots = [(lat - ttft) / (out - 1) * 1000 for out, ttft, lat, ok in rows if ok]
    assert attrs["mean_tpot_ms"] == pytest.approx(sum(tpots) / len(tpots), rel=1e-9)
    assert attrs["mean_tpot_ms"] > 20  # simulated ~33 ms on 4xA6000; 0 if counted as 1
    assert attrs["mean_tpot_ms"] == pytest.approx(with_usage["mean_tpot_ms"], rel=0.5)
    assert attrs["output_throughput"] == pytest.approx(
        attrs["total_output_tokens"] / attrs["duration"]
    )

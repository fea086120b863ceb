"""Only a measurement is reused for a config proposed again (issue 24, item 10): a refusal
the precheck only predicted is launched under `--no-precheck`, and a trial stopped early is
measured whole under `--no-pruning`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tuner_testing import sim_study, tuner

pytestmark = pytest.mark.slow  # whole studies: `make test`, not `make test-fast`


def _trials(study: Path, *extra: str) -> list[dict]:
    out = tuner("trials", str(study), *extra, "--format", "json", cwd=study.parent)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _two_configs(tmp_path: Path, tokenizer: Path, param: str, choices: list, **top) -> Path:
    """Two configs only (vLLM's default first): the sampler proposes the other one again."""
    space = {param: {"type": "categorical", "choices": choices, "default": choices[0]}}
    return sim_study(
        tmp_path,
        tokenizer,
        sampler={"name": "random", "seed": 0},
        search_space={"parameters": space},
        **top,
    )


def test_a_predicted_refusal_is_launched_under_no_precheck(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    # 0.3 of an A6000 leaves the 32B model no KV cache: the precheck predicts the refusal
    study = _two_configs(
        tmp_path,
        tiny_model_dir,
        "gpu-memory-utilization",
        [0.9, 0.3],
        workload={"num_prompts": 4},
    )
    first = tuner("run", str(study), "--n-trials", "2", cwd=tmp_path)  # the baseline, then 0.3
    assert first.returncode == 0, first.stdout + first.stderr
    predicted = [r for r in _trials(study) if r["param_gpu-memory-utilization"] == 0.3]
    assert predicted and predicted[0]["engine_s"] == 0.0  # refused before launch
    assert predicted[0]["failure"].startswith("kv_cache_too_small")
    assert predicted[0]["state"] == "REFUSED (predicted)"  # not COMPLETE: nothing measured

    again = tuner("run", str(study), "--n-trials", "1", "--no-precheck", cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    rows = [r for r in _trials(study) if r["param_gpu-memory-utilization"] == 0.3]
    launched = [r for r in rows if r["reused_from"] is None and r["engine_s"] > 0]
    assert len(launched) == 1, rows  # the engine itself was asked, not the prediction reused
    assert launched[0]["failure"].startswith("kv_cache_too_small")  # and it agreed
    assert launched[0]["state"] == "FAILED"


def test_a_trial_stopped_early_is_measured_whole_under_no_pruning(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    # max-num-seqs 1 queues 32 prompts: the TTFT SLO is broken for sure well before the end
    study = _two_configs(
        tmp_path,
        tiny_model_dir,
        "max-num-seqs",
        [256, 1],
        workload={"num_prompts": 32},
        objective={"slo": ["p99_ttft_ms<=1000"]},
        pruning={"check_every_requests": 2},
    )
    db = ("--storage", "sqlite:///t.db")
    skip = "--no-prediction-skip"  # stopped, not ruled out before launch
    assert tuner("plan", str(study), "--n-trials", "2", skip, *db, cwd=tmp_path).returncode == 0
    stopped = [r for r in _trials(study, "--simulated", *db) if r["param_max-num-seqs"] == 1]
    assert [r["state"] for r in stopped] == ["PRUNED"]

    out = tuner("plan", str(study), "--n-trials", "1", "--no-pruning", skip, *db, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    rows = [r for r in _trials(study, "--simulated", *db) if r["param_max-num-seqs"] == 1]
    assert [r["state"] for r in rows] == ["PRUNED", "INFEASIBLE"]  # run to the end this time
    whole = rows[1]
    assert whole["reused_from"] is None and whole["failure"] == "breaks p99_ttft_ms<=1000"
    assert whole["p99_ttft_ms"] > rows[0]["p99_ttft_ms"]  # all 32 requests, not the first few

    # with pruning on again, both configs have results that stand: nothing is launched
    before = len(_trials(study, "--simulated", *db))
    out = tuner("plan", str(study), "--n-trials", "1", *db, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    new = _trials(study, "--simulated", *db)[before:]
    assert new and all(r["reused_from"] is not None and r["engine_s"] == 0 for r in new)

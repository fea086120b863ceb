"""benchmarks/published: the published real-GPU cases are well-formed, and the runner takes one
case through the `tuner plan` CLI end to end (docs/simulator.md, "How close (real GPUs)")."""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def suite():
    path = REPO / "benchmarks" / "published_gpu.py"
    spec = importlib.util.spec_from_file_location("published_gpu", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["published_gpu"] = module
    spec.loader.exec_module(module)
    return module


def test_cases_file_is_well_formed(suite) -> None:
    data = suite.load_cases()
    assert suite.case_problems(data) == []
    cases = data["cases"]
    assert len(cases) >= 12
    assert len({c["gpu"] for c in cases}) >= 3
    assert any(c["tp"] > 1 for c in cases)
    assert {c["split"] for c in cases} == {"fit", "held_out"}
    # the V0 sources are marked as such
    lambda_cases = [c for c in cases if c["source"]["repo"] == "LambdaLabsML/vllm-benchmark"]
    assert lambda_cases and all(c["engine"] == "V0" for c in lambda_cases)
    for case in cases:  # every published figure is quoted from its source
        quote = case["source"]["quote"]
        for fig in case["published"].values():
            assert f"{fig['value']}".rstrip("0").rstrip(".") in quote, (case["id"], fig)


def test_malformed_cases_are_named(suite) -> None:
    data = suite.load_cases()
    bad = copy.deepcopy(data)
    del bad["cases"][0]["source"]
    bad["cases"][1]["split"] = "train"
    bad["cases"][2]["published"]["mean_ttft_ms"] = {"value": -1, "stat": "mean"}
    bad["cases"][3]["published"]["made_up_ms"] = {"value": 1, "stat": "mean"}
    bad["cases"][4]["gpu"] = "b300"
    problems = suite.case_problems(bad)
    assert len(problems) == 5, problems
    assert "lacks source" in problems[0]


def test_runner_simulates_one_case_through_the_cli(suite, tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    case = "ldsingh-a6000-qwen2.5-7b-conc8"
    assert suite.main(["--case", case, "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    rows = result["rows"]
    assert {r["metric"] for r in rows} == {"median_ttft_ms", "median_tpot_ms", "output_throughput"}
    for r in rows:
        assert r["case"] == case and r["simulated"] > 0
        assert r["ratio"] == pytest.approx(r["simulated"] / r["published"])
    # the published figure is compared after its stated factor (chunks/s to tokens/s)
    tput = next(r for r in rows if r["metric"] == "output_throughput")
    assert tput["published"] == pytest.approx(240.4 * 0.9615)
    assert result["summary"]["fit/tpot"]["figures"] == 1


def test_v0_cases_are_reported_apart_from_the_v1_medians(suite) -> None:
    """The simulator is vLLM V1 (0.32 has no V0): a V0 case's figures leave the fit, held-out
    and all medians and get their own line."""

    def row(split, engine, ratio):
        return {"split": split, "engine": engine, "metric": "median_tpot_ms", "ratio": ratio}

    rows = [row("fit", "V1", 1.05), row("held_out", "V1", 0.9), row("held_out", "V0", 0.14)]
    got = suite.summary(rows)
    assert got["all/tpot"]["figures"] == 2 and got["all/tpot"]["over_2x"] == 0
    assert got["all/tpot"]["median_abs_error"] == pytest.approx(0.075)
    assert got["held_out/tpot"]["median_abs_error"] == pytest.approx(0.1)
    assert got["V0/tpot"] == {"median_abs_error": pytest.approx(0.86), "figures": 1, "over_2x": 1}

"""`best`, `export` (every format) and the report state the change against vLLM's defaults
(the baseline trial) in units and percent, and carry every verdict `best` prints (issue 21,
§3): one `DefaultsComparison` and one verdict list, rendered per output."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from tuner.results.change import Change, plain
from tuner_testing import sim_study, tuner


def test_a_change_in_words() -> None:
    assert Change("mean_tpot_ms", 201.7, 159.1).words() == "mean TPOT 201.7 → 159.1 ms (−21 %)"
    assert Change("p99_ttft_ms", 3184.2, 3313.0).words() == "p99 TTFT 3184 → 3313 ms (+4 %)"
    assert Change("output_throughput", 87.7, 87.2).words() == "output 87.7 → 87.2 tok/s (−0.6 %)"
    assert Change("mean_tpot_ms", 50.0, 50.0).words().endswith("(±0 %)")
    # a change that rounds to nothing still has its sign: "median ITL 7.064 → 7.064 ms (±0.0 %;
    # clearly: ...)" read as no change listed as clearly worse (a simulated study's tiny CIs)
    tiny = Change("median_itl_ms", 7.063966, 7.064266)
    assert tiny.words() == "median ITL 7.064 → 7.064 ms (+<0.1 %)"
    assert Change("median_itl_ms", 7.064266, 7.063966).words().endswith("(−<0.1 %)")
    capped = Change("capacity_rps", 1.37, 2.0, after_capped=True)
    assert capped.words().startswith("capacity 1.37 → ≥ 2 req/s (+46 % or more; ≥: the highest")
    assert Change("mean_tpot_ms", 201.7, 159.1).better is True
    assert Change("output_throughput", 87.7, 87.2).better is False
    assert [plain(v) for v in (12345.6, 0.0123456, 87.70)] == ["12346", "0.01235", "87.7"]


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Path:
    """A planned study whose defaults (max-num-seqs 8) any tuned config beats on TTFT."""
    tmp = tmp_path_factory.mktemp("defaults")
    path = sim_study(tmp, tiny_model_dir, workload={"num_prompts": 24})
    data = yaml.safe_load(path.read_text())
    data["search_space"]["parameters"]["max-num-seqs"]["default"] = 8
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    plan = tuner("plan", str(path), "--n-trials", "3", cwd=tmp)
    assert plan.returncode == 0, plan.stderr
    return path


def _run(study: Path, *args: str) -> str:
    out = tuner(*args, str(study), "--simulated", cwd=study.parent)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.slow  # a whole study
def test_best_and_every_export_state_the_change_and_every_verdict(study: Path) -> None:
    best = _run(study, "best").splitlines()
    (change,) = [line for line in best if line.startswith("# against vLLM's defaults")]
    words = r"(-?[\d.]+) → ([\d.]+) {unit} \(([−+±]<?[\d.]+) %\)"
    pattern = ", ".join(
        f"{label} {words.format(unit=unit)}"
        for label, unit in (("p99 TTFT", "ms"), ("mean TPOT", "ms"), ("output", "tok/s"))
    )
    found = re.fullmatch(r"# against vLLM's defaults \(baseline trial 0\): " + pattern, change)
    assert found, change
    # the baseline's max-num-seqs 8 queues most of 24 requests: the tuned config cuts TTFT
    before, after, pct = found.group(1, 2, 3)
    assert float(after) < float(before) and pct.startswith("−")
    after_change = best[best.index(change) + 1 : next(i for i, x in enumerate(best) if "vllm" in x)]
    assert after_change and all(v.startswith("# ") for v in after_change)
    moved = ("# WORSE than vLLM's defaults", "# nothing stored got worse", "# better than vLLM's")
    # the flags that carry the gain (tests/test_smallest_change.py) are not verdicts
    smallest = ("# the smallest change", "# every flag trial", "# kept --", "# dropped --")
    smallest += ("# SIMULATED score of the command", "# which changed flags")
    verdicts = [v for v in after_change if not v.startswith(moved + smallest)]
    texts = [v.removeprefix("# ") for v in verdicts]

    shell = _run(study, "export")
    yaml_text = _run(study, "export", "--format", "yaml")
    for text in (shell, yaml_text):
        assert change in text.splitlines()
        for verdict in texts:
            assert re.search(rf"^# (DOUBT|note): {re.escape(verdict)}$", text, re.M), verdict
    doc = json.loads(_run(study, "export", "--format", "json"))
    ours = doc["against_defaults"]
    assert ours["text"] == [change.removeprefix("# ")]
    ttft = ours["changes"][0]
    assert ttft["metric"] == "p99_ttft_ms" and ours["baseline_trial"] == 0
    assert ttft["change_percent"] == pytest.approx((ttft["value"] / ttft["baseline"] - 1) * 100)
    assert ttft["value"] == doc["metrics"]["p99_ttft_ms"] and ttft["better"] is True
    assert ttft["baseline"] == doc["baseline_metrics"]["p99_ttft_ms"]
    assert [v["text"] for v in doc["verdicts"]] == texts
    # median ITL carries its interval like the headline metrics (issue 34, item 3)
    lo, hi = doc["metric_ci"]["median_itl_ms"]
    assert lo <= doc["metrics"]["median_itl_ms"] <= hi
    worse = [line for line in best if line.startswith("# WORSE than")]
    parts = [part for w in worse for part in w.split("); ") if "median ITL" in part]
    assert all(
        re.search(r"median ITL [\d.]+ → [\d.]+ ms \([^;]+; (not )?clearly: CI ", p) for p in parts
    )
    # the JSON's list is the lines' (one `change.moved`): each figure named there, none else
    moved_text = " ".join(line for line in best if line.startswith(moved[::2]))
    for m in doc["moved_from_defaults"]:
        assert f"{m['label']} " in moved_text and isinstance(m["clearly"], bool)
    assert moved_text.count(" → ") == len(doc["moved_from_defaults"])

    report = study.parent / "r.html"
    _run(study, "report", "-o", str(report))
    page = report.read_text()
    assert "pre.notes { white-space: pre-wrap;" in page  # the grey box wraps, cuts nothing
    notes = re.search(r'<pre class="notes">(.*?)</pre>', page, re.S)
    assert notes is not None
    shown = notes.group(1).replace("&#39;", "'")
    assert change.removeprefix("# ") in shown
    assert all(verdict in shown for verdict in texts)
    heads = '<th class="words">against vLLM&#39;s defaults</th><th class="words">doubts</th>'
    assert heads in page

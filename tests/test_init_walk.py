"""A new operator's study, not one the other tests use: `tuner init` run outside the checkout
on a JSONL file with an SLO on a percentile the default workload lacks, `tuner plan` on it
(virtual time), then `tuner export`. Each test is a wrong answer found by that walk."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from tuner_testing.cli import REPO, tuner

MODEL = "deepseek-r1-0528-qwen3-8b"
SLO = ("p95_itl_ms<=100", "p99_ttft_ms<=2000")


@pytest.fixture(scope="module")
def walk(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """The study file, its storage URL, and `tuner plan`'s output."""
    tmp = tmp_path_factory.mktemp("walk")
    data = tmp / "chats.jsonl"
    ask = {"messages": [{"role": "user", "content": "Tell me about topic 7. " * 20}]}
    data.write_text("\n".join(json.dumps({**ask, "output_len": 64}) for _ in range(12)) + "\n")
    slo = [part for limit in SLO for part in ("--slo", limit)]
    made = tuner(
        "init", "--no-preview", "--model", MODEL, "--gpu", "h100", "--count", "2",
        "--traffic", data.name, *slo, "--hours", "1", "-o", "s.yaml", cwd=tmp,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    # init now sets max-model-len from the file (512): taken out, as a study written before
    # that, so vLLM's rule (batched tokens below max-model-len, chunked prefill off) refuses
    # configs, as `test_a_rule_refusal_counts_as_a_rule` needs
    written = (tmp / "s.yaml").read_text()
    assert "    max-model-len: 512\n" in written
    (tmp / "s.yaml").write_text(written.replace("    max-model-len: 512\n", ""))
    db = f"sqlite:///{tmp / 't.db'}"
    planned = tuner("plan", "s.yaml", "--n-trials", "6", "--storage", db, cwd=tmp)
    assert planned.returncode == 0, planned.stderr
    return tmp / "s.yaml", db, planned.stdout + planned.stderr


def test_init_outside_the_checkout_finds_its_tokenizer(walk: tuple[Path, str, str]) -> None:
    # `make model` writes the tiny tokenizer in the checkout; init ran from another folder
    data = yaml.safe_load(walk[0].read_text())
    assert data["workload"]["tokenizer"] == str((REPO / ".cache" / "tiny-qwen2").resolve())


def test_an_slo_percentile_is_measured(walk: tuple[Path, str, str]) -> None:
    # was refused: "objective.slo: p95_itl_ms is not measured: metric_percentiles lacks 95"
    data = yaml.safe_load(walk[0].read_text())
    assert data["workload"]["metric_percentiles"] == "95,99"
    assert data["objective"]["slo"] == list(SLO)
    checked = tuner("check", "--no-preview", walk[0].name, "--storage", walk[1], cwd=walk[0].parent)
    assert checked.returncode == 0, checked.stderr


def test_export_states_the_slo_it_judged_by(walk: tuple[Path, str, str]) -> None:
    study, db, _ = walk
    args = ("export", study.name, "--storage", db, "--simulated")
    shell = tuner(*args, cwd=study.parent)
    doc = json.loads(tuner(*args, "--format", "json", cwd=study.parent).stdout)
    # 3: the file holds vLLM's defaults (the best may be trial 0, or held back)
    held = doc["trial"] == 0 or doc["recommendation"]["recommended"] == "defaults"
    assert shell.returncode == (3 if held else 0), shell.stderr
    assert f"# SLO: {', '.join(SLO)}\n" in shell.stdout
    tuned = tuner(*args, "--trial", "1", cwd=study.parent).stdout  # the best may be trial 0
    assert re.search(r"against vLLM's defaults .*\(.\d+ %\)", tuned), tuned
    assert doc["slo"] == list(SLO) and doc["slo_given"] is False  # was []
    one = json.loads(tuner(*args, "--format", "json", "--trial", "1", cwd=study.parent).stdout)
    assert one["against_defaults"]["changes"] and one["slo"] == list(SLO)
    # the params as the command says them: 0.9, not 0.8999999999999999
    assert all(len(repr(v)) < 12 for v in doc["params"].values() if isinstance(v, float))
    limit = ("--slo", "p99_ttft_ms<=900")
    given = json.loads(tuner(*args, "--format", "json", *limit, cwd=study.parent).stdout)
    assert given["slo"] == ["p99_ttft_ms<=900"] and given["slo_given"] is True


def test_a_rule_refusal_counts_as_a_rule(walk: tuple[Path, str, str]) -> None:
    # a built-in model's length is known only to the simulator: its refusal of
    # max-num-batched-tokens < max_model_len (chunked prefill off) was counted as "memory"
    out = " ".join(walk[2].split())
    refused = out.count("not launched (invalid_argument)")
    assert refused >= 1, out
    assert "saved: 0 by the memory precheck" in out, out
    assert f"{refused} config(s) refused by vLLM's rules, never launched and not counted" in out


def test_a_misspelt_file_gets_its_near_name(walk: tuple[Path, str, str]) -> None:
    study, db, _ = walk
    typo = tuner(
        "init", "--no-preview", "--model", MODEL, "--traffic", "chat.jsonl", cwd=study.parent
    )
    assert typo.returncode == 2 and typo.stderr.count("\n") == 1, typo.stderr
    assert "(did you mean 'chats.jsonl'?)" in typo.stderr
    moved = study.parent / "moved.yaml"
    moved.write_text(study.read_text().replace("chats.jsonl", "chat.jsonl"))
    checked = tuner("check", "--no-preview", moved.name, "--storage", db, cwd=study.parent)
    assert checked.returncode == 2
    line = next(x for x in checked.stderr.splitlines() if "dataset file not found" in x)
    assert line.endswith("(did you mean 'chats.jsonl'?)"), line  # as the file names it


def test_an_slo_change_is_said_then_rejudged_keeping_the_trials(
    walk: tuple[Path, str, str],
) -> None:
    """Last in this module: it re-judges the walk's study. Before a run re-scores them,
    `best` said nothing of the file's new SLO and judged by the old one."""
    study, db, _ = walk
    changed = study.parent / "tighter.yaml"
    changed.write_text(study.read_text().replace("p99_ttft_ms<=2000", "p99_ttft_ms<=1500"))
    args = ("--storage", db, "--simulated")
    before = tuner("best", changed.name, *args, cwd=study.parent)
    assert before.returncode == 0, before.stderr
    (note,) = before.stderr.splitlines()
    assert note.startswith("note: tighter.yaml changes how trials are judged (objective.slo:")
    assert "`tuner run tighter.yaml` re-scores them" in note
    trials = tuner("trials", study.name, *args, "--format", "json", cwd=study.parent).stdout
    planned = tuner("plan", changed.name, "--n-trials", "1", "--storage", db, cwd=study.parent)
    assert planned.returncode == 0, planned.stderr
    assert "none is measured again; the baseline (trial 0) is kept" in " ".join(
        (planned.stdout + planned.stderr).split()
    )
    after = tuner("trials", changed.name, *args, "--format", "json", cwd=study.parent)
    kept = {t["number"]: t.get("p99_ttft_ms") for t in json.loads(trials)}
    now = {t["number"]: t.get("p99_ttft_ms") for t in json.loads(after.stdout)}
    assert {n: now[n] for n in kept} == kept and len(now) == len(kept) + 1
    best = tuner("best", changed.name, *args, cwd=study.parent)
    assert best.returncode == 0 and best.stderr == "", best.stderr

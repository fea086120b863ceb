"""`tuner trials`, `pareto` and `best` fit an 80-column terminal (issue 21, §5): whole words in
headers, whole numbers in cells, units in headers, plain decimals, empty columns dropped,
`--wide` for everything. Through the CLI with COLUMNS=80 (what rich reads for its width)."""

from __future__ import annotations

import io
import os
import re
from pathlib import Path

import pytest
import yaml
from results_fixtures import PARAMS, build_study
from rich.console import Console

from tuner.results.table import FLAG_ALIASES, flag_alias
from tuner.results.views import print_trials_table, trials_frame
from tuner.spec.figures import figure
from tuner.spec.metric_keys import metric_label
from tuner.store.storage import Store
from tuner.trial import read_all
from tuner_testing import REPO, tuner

E_NOTATION = re.compile(r"\d[eE][+-]?\d")
FLAGS = ("max-num-seqs", "block-size", "max-num-batched-tokens", "gpu-memory-utilization")
FLAGS += ("enable-chunked-prefill", "VLLM_CPU_KVCACHE_SPACE")


def _header_words() -> set[str]:
    """Every word a header may show: whole labels' words, flag names, their hyphen parts and
    aliases; a header cut mid-word (`utili`, `d-token`) is none of them."""
    labels = [metric_label(m) for m in ("p99_ttft_ms", "mean_tpot_ms", "output_throughput")]
    labels += ["#", "state", "trial", "runs", "score", "engine (s)", *FLAGS, *FLAG_ALIASES.values()]
    labels += ["95% CI", "within noise of"]  # `tuner pareto`
    labels += [flag_alias(f) for f in FLAGS]
    words = {w for label in labels for w in label.split()}
    for flag in FLAGS:
        parts = flag.split("-")
        pieces = [p + "-" for p in parts[:-1]] + [parts[-1]]
        # stacked pieces join on a line: max-num- / batched- / tokens
        words |= {"".join(pieces[i:j]) for i in range(len(pieces)) for j in range(i + 1, 5)}
    return words


def _env(columns: int = 80) -> dict[str, str]:
    env = {**os.environ, "COLUMNS": str(columns), "PYTHONWARNINGS": "ignore"}
    env.pop("TUNER_STORAGE", None)
    return env


def _check_fits(out: str, width: int = 80) -> list[str]:
    """Every line within `width`, no e-notation; returns the table's header lines."""
    lines = out.splitlines()
    assert all(len(line) <= width for line in lines), "\n".join(lines)
    assert not E_NOTATION.search(out), out
    rule = next(i for i, line in enumerate(lines) if line.startswith("──"))
    header = lines[:rule]
    unknown = {w for line in header for w in line.split()} - _header_words()
    assert not unknown, f"header words cut or unknown: {unknown}\n{out}"
    return header


def test_number_formatter() -> None:
    assert figure(0.8999999999999999) == "0.9" and figure(17255.3) == "17255"
    assert figure(1.893e4) == "18930" and figure(197.47) == "197.5" and figure(0.09684) == "0.09684"
    assert figure(-0.0001, 3, sign=True) == "+0.000" and figure(0.0968, 3, sign=True) == "+0.097"
    assert figure(None) == figure(float("nan")) == "" and figure(256) == "256"
    assert figure(True) == "True" and figure(3.0) == "3"
    assert metric_label("p99_ttft_ms") == "P99 TTFT (ms)"
    assert metric_label("output_throughput") == "output (tok/s)"


@pytest.fixture
def handbuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """A stored study whose figures read badly in `.4g` (17255.3 ms, a float parameter stored
    as 0.8999999999999999), with a failed trial."""
    monkeypatch.setitem(PARAMS, 1, {**PARAMS[1], "gpu-memory-utilization": 0.8999999999999999})
    trials = {
        0: (1500.0, 70.0, 1000.0, 0.0, "ok"),
        1: (17255.3, 75.123456, 1234.5678, 0.8999999999999999, "slo"),
        2: (0.0, 0.0, 0.0, 10.0, "failed"),
        3: (1800.0, 50.0, 1300.0, -0.4, "ok"),
    }
    return build_study(tmp_path, trials=trials)


def test_trials_pareto_best_fit_80_columns(handbuilt: tuple[Path, str], tmp_path: Path) -> None:
    study_file, url = handbuilt
    db = ("--storage", url)
    trials = tuner("trials", str(study_file), *db, cwd=tmp_path, env=_env())
    assert trials.returncode == 0, trials.stderr
    header = "\n".join(_check_fits(trials.stdout))
    assert "(ms)" in header and "(tok/s)" in header and "P99" in header
    assert "17255" in trials.stdout and " 0.9 " in trials.stdout
    assert "0.8999" not in trials.stdout and "75.12 " in trials.stdout
    # the whole failure reason under the table, not cut at a column's edge
    assert "trial 2: kv_cache_too_small: No available memory for the cache blocks." in (
        " ".join(trials.stdout.split())
    )
    assert "* the baseline: vLLM's defaults" in trials.stdout
    assert "gpu mem = gpu-memory-utilization" in " ".join(trials.stdout.split())

    pareto = tuner("pareto", str(study_file), *db, cwd=tmp_path, env=_env())
    assert pareto.returncode == 0, pareto.stderr
    title, table = pareto.stdout.split("\nobjectives: ", 1)
    _check_fits(table.split("\n", 1)[1])  # after the title (wrapped on words)
    # whole, then how many trade-offs the intervals tell apart
    assert re.fullmatch(
        r"Pareto front of handbuilt: \d of \d feasible configs\nby their 95% intervals, .*", title
    )
    assert table.startswith("P99 TTFT (ms), lower is better; mean TPOT (ms), lower is better\n")

    best = tuner("best", str(study_file), *db, cwd=tmp_path, env=_env())
    assert best.returncode == 0, best.stderr
    assert all(len(line) <= 80 for line in best.stdout.splitlines() if line.startswith("#"))
    whole = tuner("best", str(study_file), *db, "--wide", cwd=tmp_path, env=_env())
    assert max(len(line) for line in whole.stdout.splitlines()) > 80  # --wide: lines whole
    assert _unwrapped(best.stdout) == whole.stdout.splitlines()  # only wrapped, on words


def _unwrapped(text: str) -> list[str]:
    """`best`'s lines with each wrapped comment joined again (continuations: `#   `)."""
    out: list[str] = []
    for line in text.splitlines():
        if line.startswith("#   "):
            out[-1] += " " + line.removeprefix("#   ")
        else:
            out.append(line)
    return out


def test_wide_shows_every_column_whole(handbuilt: tuple[Path, str], tmp_path: Path) -> None:
    study_file, url = handbuilt
    wide = tuner("trials", str(study_file), "--storage", url, "--wide", cwd=tmp_path, env=_env())
    assert wide.returncode == 0, wide.stderr
    head = wide.stdout.splitlines()[0].split("  ")
    names = [w.strip() for w in head if w.strip()]
    assert names[:3] == ["#", "state", "max-num-seqs"]
    assert "gpu-memory-utilization" in names and "P99 TTFT (ms)" in names and "failure" in names
    assert "engine (s)" not in names  # no trial of this study stored one: an empty column
    assert "reused from" not in names  # nor was any reused
    assert "0 (baseline)" in wide.stdout


def test_rich_console_80_columns_on_a_simulated_study(tmp_path: Path, tiny_model_dir: Path) -> None:
    """A `tuner plan` study of the shipped demo (the simulator, virtual time), printed to a rich
    console 80 columns wide: it fits, and leaves out only what it says it left out."""
    store = f"sqlite:///{tmp_path / 't.db'}"
    data = yaml.safe_load((REPO / "studies" / "demo-sim.yaml").read_text())
    data["engine"]["flags"]["tokenizer"] = data["workload"]["tokenizer"] = str(tiny_model_dir)
    data["search_space"] = str(REPO / "search_spaces" / "vllm-core.yaml")
    study = tmp_path / "demo.yaml"
    study.write_text(yaml.safe_dump(data))
    plan = tuner("plan", str(study), "--n-trials", "4", "--storage", store, cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    points = read_all(Store(store).load_study("demo-sim-simulated").get_trials(deepcopy=False))
    out = io.StringIO()
    print_trials_table(trials_frame(points), Console(file=out, width=80))
    _check_fits(out.getvalue())
    # the time spent gives way first, and the note names every column left out
    assert "not shown, to fit 80 columns: engine (s), start-up (s), workload (s) (--wide)" in (
        " ".join(out.getvalue().split())
    )
    narrow = out.getvalue()
    out = io.StringIO()
    print_trials_table(trials_frame(points), Console(file=out, width=200))
    assert "engine" in out.getvalue() and "not shown" not in out.getvalue()  # room for all
    _same_cells(narrow, out.getvalue())


def _rows(text: str) -> dict[str, list[str]]:
    """Each table row's words, by its first (the trial number)."""
    lines = text.splitlines()
    rule = next(i for i, line in enumerate(lines) if line.startswith("──"))
    rows = {}
    for line in lines[rule + 1 :]:
        if not line.strip() or not line[0].isdigit():
            break
        words = line.split()
        rows[words[0]] = words
    return rows


def _same_cells(narrow: str, wide: str) -> None:
    """Every cell a narrow table shows is a whole cell of the wide one: no number cut."""
    narrow_rows, wide_rows = _rows(narrow), _rows(wide)
    assert narrow_rows.keys() == wide_rows.keys()
    for number, words in narrow_rows.items():
        missing = set(words) - set(wide_rows[number])
        assert not missing, f"trial {number}: {missing} cut\n{narrow}\n{wide}"


def test_a_table_too_wide_leaves_out_whole_columns_and_says_which() -> None:
    """Nine tuned flags, three figures and a score do not fit 80 columns: the optional column
    goes first, then the flags from the right, each named; the figures and the score stay
    whole (before, rich cut them: 165 tok/s read `16`, and the score vanished unsaid)."""
    from tuner.results.table import Column, print_table

    flags = [f"flag-number-{i}" for i in range(9)]
    cols = [Column("#", ["0", "1"], text=True)]
    states = ["RULED OUT (predicted)", "COMPLETE"]
    cols.append(Column("state", states, text=True, short_cells=["RULED OUT", "COMPLETE"]))
    cols += [Column(f, ["123456", "7"], short=flag_alias(f), spare=True) for f in flags]
    cols += [Column("output (tok/s)", ["165.25", "1650.5"]), Column("score", ["+0.125", "-1.5"])]
    cols.insert(5, Column("engine (s)", ["92", "93"], optional=True))
    out = io.StringIO()
    print_table(Console(file=out, width=80), cols)
    text = out.getvalue()
    assert all(len(line) <= 80 for line in text.splitlines()), text
    rows = _rows(text)
    assert {"165.25", "+0.125"} <= set(rows["0"]) and {"1650.5", "-1.5"} <= set(rows["1"])
    left = " ".join(text.split()).split("not shown, to fit 80 columns: ")[1]
    named = [f for f in flags if f in left]
    assert left.startswith("engine (s), ") and named == flags[-len(named) :], left
    shown = [f for f in flags if f not in named]
    assert shown and all(flag_alias(f) in text for f in shown)  # the rest, by alias
    assert "RULED OUT = RULED OUT (predicted)" in " ".join(text.split())
    # columns that are never left out and still do not fit: printed wider, never cut
    out = io.StringIO()
    print_table(Console(file=out, width=20), cols[:2] + cols[-2:])
    assert {"165.25", "+0.125"} <= set(_rows(out.getvalue())["0"]), out.getvalue()

"""A night worth running (issue 34 §5, §7): `tuner init` sets max-model-len from the traffic,
configs vLLM's rules refuse do not use up `n_trials`, and the study file names what it reads
from its own folder, so it can be shared."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from tuner.commands.run_output import print_summary as _print_summary
from tuner.run.loop import StudyLoop
from tuner.run.summary import MAX_REFUSED_IN_A_ROW
from tuner.runners.plan import PlanRunner
from tuner.scaffold.model_len import model_len_for
from tuner.spec.study import StudySpec, load_study_spec
from tuner.store.storage import Store
from tuner.trial import read_all
from tuner_testing.cli import REPO, tuner

pytestmark = pytest.mark.slow  # whole studies and nights: `make test`, not `make test-fast`

MODEL = "deepseek-r1-distill-qwen-32b"
QUICK = ("--gpu", "a6000", "--count", "4", "--trials", "4", "--rate", "1")


def test_model_len_is_the_longest_request_with_room_in_whole_blocks() -> None:
    assert model_len_for(1920, 131072) == 2048  # chat: 1536 + 384, +5 % = 2016
    assert model_len_for(32768 + 1024, 131072) == 35584  # longdoc: 35482, up to 256s
    assert model_len_for(32000, 32768) is None  # as long as the model's own: vLLM's default


@pytest.mark.parametrize(("traffic", "expected"), [("chat", 2048), ("longdoc", 35584)])
def test_init_sets_max_model_len_from_the_traffic(
    tmp_path: Path, traffic: str, expected: int
) -> None:
    # was the model's 131,072: 7 of the README night's 15 trials were refused by vLLM
    args = ("--traffic", traffic, "-o", "s.yaml")
    made = tuner("init", "--no-preview", "--model", MODEL, *QUICK, *args, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    data = yaml.safe_load((tmp_path / "s.yaml").read_text())
    assert data["engine"]["flags"]["max-model-len"] == expected
    assert f"max-model-len {expected}: the longest request" in made.stdout


def test_init_sets_max_model_len_from_a_traffic_file(tmp_path: Path) -> None:
    """A `--traffic FILE.jsonl` is read as a trial reads it: its longest request sets
    max-model-len (was the model's 131,072, and vLLM's defaults on 2× T4 did not start);
    a request that leaves its output length to the server leaves it unknown, said so."""
    import json

    def write(name: str, output_len: int | None) -> None:
        rows = [{"messages": [{"role": "user", "content": "word " * 300}], "output_len": 200}]
        rows.append({"prompt": "a short one", "output_len": output_len})
        lines = [json.dumps({k: v for k, v in r.items() if v is not None}) for r in rows]
        (tmp_path / name).write_text("\n".join(lines) + "\n")

    write("bounded.jsonl", 20)
    args = ("--traffic", "bounded.jsonl", "-o", "s.yaml")
    made = tuner("init", "--no-preview", "--model", MODEL, *QUICK, *args, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    found = yaml.safe_load((tmp_path / "s.yaml").read_text())["engine"]["flags"]["max-model-len"]
    assert found % 256 == 0 and 512 <= found <= 1024  # ~300-token prompt + 200 out, + 5 %
    assert f"max-model-len {found}: the longest request (" in made.stdout
    write("open.jsonl", None)
    args = ("--traffic", "open.jsonl", "-o", "t.yaml")
    made = tuner("init", "--no-preview", "--model", MODEL, *QUICK, *args, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert (
        "max-model-len" not in yaml.safe_load((tmp_path / "t.yaml").read_text())["engine"]["flags"]
    )
    assert "leaves its output length to the server" in " ".join(made.stdout.split())


def _spec(tokenizer: Path, low: int, high: int, n_trials: int) -> StudySpec:
    """A planned study whose max-num-batched-tokens range [low, high] vLLM's rules refuse in
    part (below max-num-seqs, or below max-model-len with chunked prefill off)."""
    batched = {"type": "int", "low": low, "high": high, "log": True, "default": high}
    return StudySpec.model_validate(
        {
            "name": "free",
            "engine": {
                "command": ["{python}", "-m", "tuner.cli", "sim", "serve", "--model", "{model}"],
                "model": MODEL,
                "flags": {"tensor-parallel-size": 4, "max-model-len": 8192, "gpu": "a6000"},
            },
            "hardware": {"gpu": "a6000", "count": 4},
            "search_space": {
                "parameters": {
                    "max-num-seqs": {"type": "int", "low": 128, "high": 256, "default": 256},
                    "max-num-batched-tokens": batched,
                    "enable-chunked-prefill": {"type": "bool", "default": True},
                }
            },
            "workload": {
                "tokenizer": str(tokenizer),
                "random_input_len": 256,
                "random_output_len": 32,
                "num_prompts": 20,
                "request_rate": 8,
            },
            "budget": {"n_trials": n_trials},
            "sampler": {"name": "random", "seed": 0},
            "pruning": {"prediction_skip": False},
        }
    )


def test_configs_vllm_refuses_do_not_use_up_the_budget(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    spec = _spec(tiny_model_dir, 64, 16384, n_trials=4)
    store = Store(f"sqlite:///{tmp_path}/t.db")
    loop = StudyLoop(spec, store, PlanRunner(spec))
    summary = loop.run()  # the study file's budget: 4 configs vLLM takes
    points = read_all(loop.study.get_trials())
    refused = [p for p in points if p.refused_by_rules]
    assert refused and summary.saved_by_rules == len(refused)
    assert len(points) - len(refused) == 4  # was 4 in all, refused ones included
    out = io.StringIO()
    _print_summary(Console(file=out, width=300), summary, points)
    assert f"{len(refused)} config(s) refused by vLLM's rules, never launched and not counted" in (
        out.getvalue()
    )
    assert "saved: 0 by the memory precheck, 0 by reusing" in out.getvalue()  # no rules there
    store.close()


def test_a_space_vllm_refuses_everywhere_ends(tmp_path: Path, tiny_model_dir: Path) -> None:
    spec = _spec(tiny_model_dir, 16, 64, n_trials=5)  # always below max-num-seqs
    store = Store(f"sqlite:///{tmp_path}/t.db")
    summary = StudyLoop(spec, store, PlanRunner(spec)).run()
    assert summary.refused_out and summary.ran == MAX_REFUSED_IN_A_ROW == summary.saved_by_rules
    out = io.StringIO()
    _print_summary(Console(file=out, width=300), summary, [])
    assert f"vLLM's rules refused {MAX_REFUSED_IN_A_ROW} configs in a row" in out.getvalue()
    store.close()


def test_init_names_what_it_reads_from_the_study_file(tmp_path: Path) -> None:
    """The folder moves (or is shared) with the study: its tokenizer and dataset still load."""
    here = tmp_path / "team"
    here.mkdir()
    shutil.copytree(REPO / ".cache" / "tiny-qwen2", here / "tok")
    (here / "asks.jsonl").write_text('{"prompt": "hello there", "output_len": 16}\n' * 4)
    made = tuner(
        "init", "--no-preview", "--model", MODEL, *QUICK, "--traffic", "asks.jsonl",
        "--tokenizer", "tok", "-o", "s.yaml", cwd=here,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    data = yaml.safe_load((here / "s.yaml").read_text())
    assert data["workload"]["tokenizer"] == "tok"
    assert data["workload"]["dataset_path"] == "asks.jsonl"
    assert data["engine"]["flags"]["tokenizer"] == "tok"
    moved = tmp_path / "elsewhere"
    here.rename(moved)
    spec = load_study_spec(moved / "s.yaml")  # read from the file's folder, not the cwd
    assert spec.workload.tokenizer == str((moved / "tok").resolve())
    assert spec.workload.dataset_path == str((moved / "asks.jsonl").resolve())
    db = f"sqlite:///{tmp_path / 't.db'}"
    checked = tuner("check", "--no-preview", str(moved / "s.yaml"), "--storage", db, cwd=REPO)
    assert checked.returncode == 0, checked.stderr


@pytest.mark.parametrize(
    ("args", "mode"),
    [
        (("--traffic", "longdoc"), "capacity"),  # its default: how much traffic within the SLO
        (("--objective", "capacity"), "capacity"),
        (("--traffic", "longdoc", "--objective", "scalar"), None),
    ],
)
def test_init_writes_a_capacity_study(tmp_path: Path, args: tuple[str, ...], mode: str) -> None:
    made = tuner(
        "init", "--no-preview", "--model", MODEL, *QUICK, *args, "-o", "s.yaml", cwd=tmp_path
    )
    assert made.returncode == 0, made.stderr
    spec = load_study_spec(tmp_path / "s.yaml")
    assert spec.objective.mode == (mode or "scalar")
    assert f"objective: {mode or 'scalar'}," in made.stdout
    if mode == "capacity":  # the SLO decides the capacity; no latency weights are written
        written = yaml.safe_load((tmp_path / "s.yaml").read_text())["objective"]
        assert "weights" not in written and written["slo"] == list(spec.objective.slo)


def test_an_unknown_objective_is_one_line(tmp_path: Path) -> None:
    args = ("--objective", "speed", "-o", "s.yaml")
    made = tuner("init", "--no-preview", "--model", MODEL, *QUICK, *args, cwd=tmp_path)
    assert made.returncode == 2 and made.stderr.count("\n") == 1, made.stderr
    assert "--objective speed: give scalar or capacity" in made.stderr
    assert not (tmp_path / "s.yaml").exists()


def test_init_says_the_night_may_win_nothing(tmp_path: Path) -> None:
    """The README's chat study on 4× A6000 at 1 req/s: its whole plan (30 trials) finds no
    config clearly better than vLLM's defaults (docs/preflight.md, "The plan preview"), and
    `tuner init` says so, with why and what would change it, before the night is spent."""
    made = tuner("init", "--model", MODEL, *QUICK, "-o", "s.yaml", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    line = next(x for x in made.stdout.splitlines() if x.startswith("plan preview ("))
    assert line.startswith("plan preview (30 of 30 trials, SIMULATED"), line
    assert "no config clearly beat vLLM's defaults" in line and "nothing to win" in line
    assert "more prompts per trial (--num-prompts" in line, line
    assert "# plan preview (" in (tmp_path / "s.yaml").read_text()  # in the file's comment
    db = f"sqlite:///{tmp_path / 't.db'}"
    quick = tuner("check", "s.yaml", "--storage", db, "--no-preview", cwd=tmp_path)
    assert quick.returncode == 0 and "plan preview" not in quick.stdout, quick.stderr


def test_the_preview_says_a_predicted_gain(tiny_model_dir: Path) -> None:
    from tuner.run.planned import planned_trials
    from tuner.scaffold.preview import preview

    # vLLM's defaults held to 4 sequences at 8 req/s: they queue, wider batches clearly win
    spec = _spec(tiny_model_dir, 512, 16384, n_trials=6)
    space = spec.search_space.model_copy(deep=True)
    space.parameters["max-num-seqs"] = space.parameters["max-num-seqs"].model_copy(
        update={"low": 4, "default": 4}
    )
    found = preview(spec.model_copy(update={"search_space": space}), planned_trials, n_trials=6)
    assert found.gain is True, found.line
    assert found.line.startswith(f"plan preview ({found.trials} of 6 trials, SIMULATED")
    assert "predicted gain" in found.line


@pytest.mark.parametrize(
    ("slo", "gain", "says"),
    [
        # nothing meets it: a looser SLO or a lower rate would change that, not "a tighter
        # SLO" or "another rate, higher" (what the preview said before)
        (
            "p99_ttft_ms<=1",
            False,
            "the night may find nothing that meets it; what would change it: a looser SLO "
            "(--slo) or a lower rate (--rate)",
        ),
        # the defaults (4 sequences at 8 req/s) queue past it, wider batches meet it: a gain
        (
            "p99_ttft_ms<=2000",
            True,
            "predicted gain: vLLM's defaults break the SLO, trial ",
        ),
    ],
)
def test_the_preview_when_the_defaults_break_the_slo(
    tiny_model_dir: Path, slo: str, gain: bool, says: str
) -> None:
    from tuner.run.planned import planned_trials
    from tuner.scaffold.preview import preview

    data = _spec(tiny_model_dir, 512, 16384, n_trials=4).model_dump(mode="json")
    data["search_space"]["parameters"]["max-num-seqs"].update(low=4, default=4)
    data["objective"]["slo"] = [slo]
    found = preview(StudySpec.model_validate(data), planned_trials, n_trials=3)
    assert found.gain is gain and says in found.line, found.line
    assert "tighter SLO" not in found.line

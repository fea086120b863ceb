"""`tuner init`'s options for what an operator sets (issue 49): the deployment's
`--max-model-len`, random traffic of `--input-len`/`--output-len`, a closed loop of
`--concurrency` requests, a `--model-config` for a hub id with no local copy; a name that says
what sets the study apart; and `tuner best` on a study only `tuner plan` stored naming
`--simulated`. In process (`draft_study`, the store), no CLI."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest

from tuner.commands.common import open_stored_study
from tuner.errors import UserError
from tuner.scaffold.draft import _name
from tuner.scaffold.options import InitOptions
from tuner.scaffold.reach import OutOfReach, Shape, out_of_reach
from tuner.scaffold.sources import study_model
from tuner.scaffold.study import Draft, draft_study
from tuner.scaffold.write import write_study
from tuner.spec.study import StudySpec, load_study_spec
from tuner.store.storage import Store
from tuner.trial.specs import study_name
from tuner_testing.cli import REPO

TINY = str(REPO / ".cache" / "tiny-qwen2")
# `rate` given: no rate search on the simulator (seconds each); the closed loop sets none
H200 = {"model": "deepseek-r1-0528-qwen3-8b", "gpu": "h200", "tokenizer": TINY, "trials": 2}
FAST = {**H200, "rate": 5.0}


def _draft(tmp_path: Path, **given: object) -> Draft:
    opts = InitOptions(**{**FAST, **given})  # type: ignore[arg-type]
    return draft_study(opts, tmp_path / "s.yaml", detect=lambda: None)


def test_max_model_len_as_the_deployment_serves_it(tmp_path: Path) -> None:
    draft = _draft(tmp_path, max_model_len=65536)
    assert draft.spec.engine.flags["max-model-len"] == 65536  # not the traffic's 2048
    assert "max-model-len 65536: as given (the model takes 131072)" in draft.notes
    with pytest.raises(UserError, match=r"--max-model-len 200000: the model takes at most 131072"):
        _draft(tmp_path, max_model_len=200_000)


def test_random_lengths_and_a_closed_loop(tmp_path: Path) -> None:
    draft = _draft(tmp_path, input_len=512, output_len=512, concurrency=8, rate=None)
    w = draft.spec.workload
    assert (w.dataset_name, w.random_input_len, w.random_output_len) == ("random", 512, 512)
    assert w.random_range_ratio == 0.0  # exactly those lengths, as `vllm bench serve`'s default
    assert w.max_concurrency == 8 and w.request_rate == math.inf  # each sent when one ends
    line = next(x for x in draft.notes if x.startswith("traffic: "))
    assert "prompts of 512 tokens, answers of 512, a closed loop of 8 requests" in line, line
    write_study(draft, tmp_path / "s.yaml", force=False)  # `.inf` reads back as the study
    assert load_study_spec(tmp_path / "s.yaml").workload.max_concurrency == 8


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ({"concurrency": 8, "objective": "capacity"}, "--concurrency 8: capacity mode"),
        ({"concurrency": 8, "traffic": "longdoc"}, "--concurrency 8: capacity mode"),
        ({"input_len": 512, "traffic": "longdoc"}, "chat traffic only"),
        ({"max_model_len": 0}, "--max-model-len 0: give at least 1"),
        ({"model_config": "no/such/dir"}, "--model-config no/such/dir: no config.json there"),
    ],
)
def test_refused_in_one_line(tmp_path: Path, given: dict[str, object], words: str) -> None:
    with pytest.raises(UserError, match=words):
        _draft(tmp_path, **given)


def test_model_config_gives_a_hub_id_its_shape(tmp_path: Path) -> None:
    shape = {
        "num_hidden_layers": 36,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 12288,
        "vocab_size": 151936,
        "torch_dtype": "bfloat16",
        "max_position_embeddings": 40960,
    }
    (tmp_path / "config.json").write_text(json.dumps(shape))
    hub = "Qwen/Qwen3-8B"  # not in the hub cache: without the config, refused
    with pytest.raises(UserError, match="--model: model 'Qwen/Qwen3-8B' is neither"):
        _draft(tmp_path, model=hub)
    draft = _draft(tmp_path, model=hub, model_config=str(tmp_path / "config.json"))
    engine = draft.spec.engine
    assert (engine.model, engine.production_model) == (str(tmp_path / "config.json"), hub)
    assert draft.data["name"].startswith("Qwen3-8B-1xh200-chat-sim")
    with pytest.raises(UserError, match="--max-model-len 65536: the model takes at most 40960"):
        _draft(tmp_path, model=hub, model_config=str(tmp_path), max_model_len=65536)
    with pytest.raises(UserError, match=r"`vllm serve` loads the weights, not a config\.json"):
        _draft(tmp_path, model=hub, model_config=str(tmp_path), engine="vllm")


def test_a_hub_id_with_no_copy_here_is_pointed_to_model_config(tmp_path: Path) -> None:
    """The walk of issue 49/50: `--model Qwen/Qwen2.5-1.5B-Instruct` with no cached copy was
    refused without naming `--model-config`, the option that takes its config.json; and
    `--model-config` without `--model` was told to give a model directory."""
    hub = "no-such-org/No-Such-Model-1.5B"
    with pytest.raises(UserError, match=r"--model-config PATH$"):
        study_model(InitOptions(model=hub))
    with pytest.raises(UserError) as caught:
        study_model(InitOptions(model=str(tmp_path / "missing")))  # a path: no hub hint
    assert "--model-config" not in str(caught.value)
    with pytest.raises(UserError, match=r"^--model-config c.json: give --model HUB_ID too"):
        study_model(InitOptions(model_config="c.json"))


def test_names_differ_with_what_sets_the_study_apart(tmp_path: Path) -> None:
    names = [
        _draft(tmp_path, **given).data["name"]
        for given in (
            {},
            {"slo": ["p99_ttft_ms<=800"]},
            {"slo": ["p99_ttft_ms<=1000"]},
            {"rate": 2.0},
        )
    ]
    assert names[0] == "deepseek-r1-0528-qwen3-8b-1xh200-chat-sim-5rps"
    assert names[1] == f"{names[0]}-p99_ttft_ms-le800"
    assert len(set(names)) == len(names), names
    # the walk of issue 49/50: 40 and 200 prompts shared a name (`tuner run` then refused the
    # second: "workload.num_prompts: 40 → 200"); an --objective other than the traffic's
    # default too (the name alone, in process: no draft, no simulation)
    hw, profile = SimpleNamespace(count=1, gpu="h200", engine="sim"), SimpleNamespace(name="m")
    named = [
        _name(InitOptions(**given), profile, hw, "chat")  # type: ignore[arg-type]
        for given in ({}, {"num_prompts": 40}, {"objective": "scalar"}, {"objective": "capacity"})
    ]
    base = "m-1xh200-chat-sim"
    assert named == [base, f"{base}-40prompts", base, f"{base}-capacity"]


def test_best_on_a_planned_only_study_names_simulated(tmp_path: Path) -> None:
    study_file = REPO / "studies" / "demo-sim.yaml"
    spec = load_study_spec(study_file)
    url = f"sqlite:///{tmp_path / 't.db'}"
    store = Store(url)
    optuna.create_study(study_name=study_name(spec, True), storage=store.optuna)
    store.close()
    with pytest.raises(UserError) as caught:
        open_stored_study(study_file, url, simulated=False)
    text = str(caught.value)
    assert text.startswith(f"no study named {spec.name!r}") and "add --simulated" in text, text
    assert f"{spec.name}-simulated" in text
    # verify and calibrate take no --simulated: they need measured trials (the walk of issue
    # 49/50: `tuner verify` told to "add --simulated", which it does not take)
    with pytest.raises(UserError) as caught:
        open_stored_study(study_file, url, simulated=None)
    text = str(caught.value)
    assert "needs measured trials, which `tuner run " in text and "add --simulated" not in text


@pytest.mark.slow  # the reach search over the nights (SIMULATED): ~3 s
def test_a_night_out_of_reach_is_refused_with_its_distance_and_levers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 49's night: 32k-token documents on 4× A6000 under p99 TTFT <= 3 s. Even one
    request at a time breaks it (SIMULATED), so no rate and no config meets it: `init` refuses,
    says how far, and which levers reach it with their figures; `--force` writes it anyway."""
    # the reach is deterministic and `--force` does not change it: the forced draft reads the
    # refused draft's (its search over the levers: ~4 s of CPU each time)
    reached: dict[str, OutOfReach | None] = {}
    search = out_of_reach

    def once(spec: StudySpec, opts: InitOptions, shape: Shape) -> OutOfReach | None:
        key = spec.model_dump_json() + repr(replace(opts, force=False))
        if key not in reached:
            reached[key] = search(spec, opts, shape)
        return reached[key]

    monkeypatch.setattr("tuner.scaffold.study.out_of_reach", once)
    given = {
        "model": "deepseek-r1-distill-qwen-32b",
        "gpu": "a6000",
        "count": 4,
        "traffic": "longdoc",
        "slo": ["p99_ttft_ms<=3000"],
        "rate": 20.0,
        "tokenizer": TINY,
        "trials": 2,
    }
    with pytest.raises(UserError) as refused:
        draft_study(InitOptions(**given), tmp_path / "s.yaml", detect=lambda: None)  # type: ignore[arg-type]
    line = str(refused.value)
    assert "no config meets p99_ttft_ms<=3000 at any rate (SIMULATED)" in line, line
    assert "× the limit; what would reach it: " in line and line.endswith(
        "--force writes the study anyway"
    )
    reach = line.split("what would reach it: ")[1].split("; not enough alone")[0]
    assert "--gpu h100: p99 TTFT " in reach and "), meets" in reach, reach  # its figure, band
    assert "--max-model-len 32768 (documents up to 8192 tokens)" in reach, reach
    assert "--count 8: p99 TTFT " in line  # weighed, with its figure, though short alone
    forced = draft_study(InitOptions(**given, force=True), tmp_path / "s.yaml", detect=lambda: None)  # type: ignore[arg-type]
    assert not forced.reachable
    assert any(x.startswith("out of reach: no config meets") for x in forced.notes)
    assert not list(tmp_path.iterdir())  # a draft writes nothing

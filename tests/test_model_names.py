"""Model names as vLLM takes them (issue 33): a hub id from the local hub cache, a directory,
a built-in name; anything else is unknown to the estimates, said once, and the study runs.
`tuner check` fails exactly where `tuner run` would."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from tuner.errors import UserError
from tuner.sim.boot import estimated_startup_s
from tuner.sim.profiles import BUILTIN_MODELS, known_model, load_model, unknown_model_note
from tuner.spec.model_source import hub_cache_dir, model_config, model_dir, tokenizer_source
from tuner_testing import sim_study, tuner

HUB_ID = "meta-llama/Llama-3.1-8B-Instruct"
REVISION = "0e9e39f249a16976918f6564b8830bc894c89659"


def fake_hub(root: Path, tiny_model_dir: Path, repo_id: str = HUB_ID) -> Path:
    """A Hugging Face hub cache holding `repo_id` at refs/main: the tiny model's files in its
    snapshot, as `huggingface-cli download` lays them out."""
    repo = root / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(REVISION)
    shutil.copytree(tiny_model_dir, repo / "snapshots" / REVISION)
    return root


@pytest.fixture
def hub(tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = fake_hub(tmp_path / "hub", tiny_model_dir)
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    return root


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, **extra}


# Resolution ------------------------------------------------------------------------------


def test_a_hub_id_is_read_from_the_local_cache(hub: Path) -> None:
    snapshot = hub / f"models--meta-llama--Llama-3.1-8B-Instruct/snapshots/{REVISION}"
    assert model_dir(HUB_ID) == snapshot
    assert model_config(HUB_ID) == snapshot / "config.json"
    assert tokenizer_source(None, HUB_ID) == str(snapshot)
    profile = load_model(HUB_ID)
    assert profile.name == HUB_ID and profile.num_layers == BUILTIN_MODELS["tiny-qwen2"].num_layers


def test_the_cache_folder_follows_huggingface_hubs_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert hub_cache_dir() == tmp_path / "home/.cache/huggingface/hub"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hub_cache_dir() == tmp_path / "xdg/huggingface/hub"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert hub_cache_dir() == tmp_path / "hf/hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    assert hub_cache_dir() == tmp_path / "cache"


def test_a_hub_id_in_the_cache_under_hf_home(
    tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_hub(tmp_path / "hf" / "hub", tiny_model_dir)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert known_model(HUB_ID) is not None


@pytest.mark.parametrize(
    "name", ["acme/not-cached", "acme-chat-v2", "a/b/c", "has space/x", "./missing", "/nope"]
)
def test_anything_else_is_unknown_not_an_error(hub: Path, name: str) -> None:
    assert model_dir(name) is None and known_model(name) is None
    note = unknown_model_note(name)
    assert note is not None and "\n" not in note and str(hub) in note
    with pytest.raises(UserError, match="nor a hub id cached in"):
        load_model(name)  # the simulated engine and `tuner plan` still refuse it


def test_a_directory_and_a_builtin_name_still_resolve(hub: Path, tiny_model_dir: Path) -> None:
    assert model_dir(str(tiny_model_dir)) == tiny_model_dir
    assert known_model(str(tiny_model_dir)) == load_model(str(tiny_model_dir))
    assert known_model("tiny-qwen2") is BUILTIN_MODELS["tiny-qwen2"]
    assert unknown_model_note("deepseek-r1-distill-qwen-32b") is None


def test_the_start_up_estimate_reads_the_models_weights() -> None:
    """An 8B model loads faster than the 32B one (the estimate used to take every model for
    the 32B: `weight_bytes` was called as a method, and the error swallowed)."""
    small = estimated_startup_s("deepseek-r1-0528-qwen3-8b", "a6000", {})
    large = estimated_startup_s("deepseek-r1-distill-qwen-32b", "a6000", {})
    assert small < large - 10
    assert estimated_startup_s("acme-chat-v2", "a6000", {}) == pytest.approx(large, abs=0.1)


def test_only_a_missing_local_path_borrows_a_built_in_shape(hub: Path) -> None:
    """The night's cost takes the built-in 32B for the shipped studies' GPU-box path; a hub id
    that is not cached is unknown, as its note says, whatever its name."""
    from tuner.run.cost import builtin_stand_in

    assert builtin_stand_in("/mnt/data/models/DeepSeek-R1-Distill-Qwen-32B") == (
        "deepseek-r1-distill-qwen-32b"
    )
    assert builtin_stand_in("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B") is None
    assert builtin_stand_in("deepseek-r1-distill-qwen-32b") is None  # known by name already


# Whole studies: `check` agrees with `run` --------------------------------------------------


@pytest.mark.slow  # a whole study or workload run: `make test`, not `make test-fast`
def test_a_study_naming_a_hub_id_checks_and_runs(tmp_path: Path, tiny_model_dir: Path) -> None:
    """The simulated engine serves a hub id from the cache, tokenizer included; `check` and
    `run` agree (both used to refuse or die: 'neither a built-in name ... nor a directory')."""
    hub = fake_hub(tmp_path / "hub", tiny_model_dir)
    study = sim_study(tmp_path, tiny_model_dir, budget={"n_trials": 2})
    data = yaml.safe_load(study.read_text())
    data["engine"]["model"] = HUB_ID
    data["engine"]["flags"] = {"gpu": "a6000", "max-model-len": 4096}  # no tokenizer: the hub's
    data["engine"].pop("export_drop_flags")
    data["hardware"] = {"gpu": "a6000", "count": 1}
    data["workload"].pop("tokenizer")  # the model's own, from its cached snapshot
    study.write_text(yaml.safe_dump(data))
    env = _env(HF_HUB_CACHE=str(hub), HF_HUB_OFFLINE="1")
    check = tuner("check", "--no-preview", str(study), cwd=tmp_path, env=env)
    assert check.returncode == 0, check.stderr
    assert "no problem found" in check.stdout and "unknown" not in check.stdout
    run = tuner("run", str(study), cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr
    assert f"vllm serve {HUB_ID}" in run.stdout
    elsewhere = _env(HF_HUB_CACHE=str(tmp_path / "empty"))
    for command in ("check", "run"):  # not cached: both refuse, with the same first line
        out = tuner(command, str(study), "--storage", f"sqlite:///{tmp_path}/b.db", cwd=tmp_path,
                    env=elsewhere)  # fmt: skip
        assert out.returncode == 2, out.stderr
        assert "tuner: error: engine.model: model 'meta-llama" in out.stderr
        assert "nor a hub id cached in" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "b.db").exists()


WRAPPER = """\
import os, sys
# A user's own engine: its model name is its own business; it serves the tiny model
# on the simulated engine, passing the tuner's flags through.
name, tokenizer, *flags = sys.argv[1:]
assert name == "acme-chat-v2", name
os.execv(sys.executable, [sys.executable, "-m", "tuner.cli", "sim", "serve", "--model",
         "tiny-qwen2", "--gpu", "a6000", "--tokenizer", tokenizer, *flags])
"""


@pytest.mark.slow  # a whole study or workload run: `make test`, not `make test-fast`
def test_a_custom_engine_with_a_model_of_its_own_runs(tmp_path: Path, tiny_model_dir) -> None:
    """Unknown to the simulator: the precheck, prediction skips, the screen and the cost are
    off, said once in `check` and once at the start of `run`, and the study runs to the end
    (it used to die at trial 0: the prediction skip's simulator could not read the model)."""
    wrapper = tmp_path / "acme_engine.py"
    wrapper.write_text(WRAPPER)
    study = sim_study(tmp_path, tiny_model_dir, budget={"n_trials": 3})
    data = yaml.safe_load(study.read_text())
    data["engine"] = {
        "command": [sys.executable, str(wrapper), "{model}", str(tiny_model_dir)],
        "model": "acme-chat-v2",
        "served_model_name": "acme",
        "startup_timeout_s": 60,
        "flags": {"max-model-len": 4096},
    }
    data["hardware"] = {"gpu": "a6000", "count": 1}
    data["search"] = {"fidelity": "multi", "candidates": 8}
    study.write_text(yaml.safe_dump(data))
    check = tuner("check", "--no-preview", str(study), cwd=tmp_path)
    assert check.returncode == 0, check.stderr
    notes = [line for line in check.stdout.splitlines() if "unknown to the simulator" in line]
    assert len(notes) == 1 and "acme-chat-v2" in notes[0], check.stdout
    assert (
        "night's cost: unknown (engine.model: no shape to simulate, see its note)" in check.stdout
    )
    run = tuner("run", str(study), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stderr.count("unknown to the simulator (model 'acme-chat-v2'") == 1, run.stderr
    trials = tuner("trials", str(study), "--format", "csv", cwd=tmp_path)
    assert len(trials.stdout.strip().splitlines()) == 1 + 3
    assert "vllm serve acme-chat-v2" in run.stdout


# The model's name is a name, never a flag ----------------------------------------------


@pytest.mark.parametrize("field", ["model", "production_model"])
@pytest.mark.parametrize("value", ["--help", " -x", "two\nlines", "  "])
def test_a_model_name_that_is_a_flag_is_refused(
    tmp_path: Path, tiny_model_dir: Path, field: str, value: str
) -> None:
    study = sim_study(tmp_path, tiny_model_dir)
    data = yaml.safe_load(study.read_text())
    data["engine"][field] = value
    study.write_text(yaml.safe_dump(data))
    out = tuner("check", "--no-preview", str(study), cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert f"engine.{field}" in out.stderr


@pytest.mark.parametrize("option", ["--production-model", "--model"])
def test_init_refuses_a_model_option_that_is_a_flag(tmp_path: Path, option: str) -> None:
    args = ["--model", "deepseek-r1-distill-qwen-32b", "--gpu", "a6000", "--count", "4"]
    out = tuner("init", "--no-preview", *args, f"{option}=--help", "-o", "s.yaml", cwd=tmp_path)
    assert out.returncode == 2, out.stdout
    assert out.stderr.startswith(f"tuner: error: {option}: '--help' is not a model name")
    assert len(out.stderr.strip().splitlines()) == 1 and not (tmp_path / "s.yaml").exists()


def test_init_takes_a_cached_hub_id_for_vllm(tmp_path: Path, tiny_model_dir: Path) -> None:
    """`vllm serve` loads a hub id from the cache: `tuner init --engine vllm` writes it as
    given, with the snapshot's tokenizer (it used to ask for a model directory)."""
    hub = fake_hub(tmp_path / "hub", tiny_model_dir)
    args = ["--model", HUB_ID, "--engine", "vllm", "--gpu", "a6000", "--rate", "2"]
    out = tuner("init", "--no-preview", *args, "--trials", "4", "-o", "s.yaml", cwd=tmp_path,
                env=_env(HF_HUB_CACHE=str(hub)))  # fmt: skip
    assert out.returncode == 0, out.stderr
    data = yaml.safe_load((tmp_path / "s.yaml").read_text())
    assert data["engine"]["command"] == ["vllm", "serve", "{model}"]
    assert data["engine"]["model"] == HUB_ID and "tokenizer" not in data["workload"]
    refused = tuner("init", "--no-preview", *args, "-o", "t.yaml", cwd=tmp_path,
                    env=_env(HF_HUB_CACHE=str(tmp_path / "empty")))  # fmt: skip
    assert refused.returncode == 2 and "a hub id cached in" in refused.stderr

"""vLLM 0.32's block-size rule per platform (tuner/spec/vllm_rules.py, issue 32 §4): the rule
itself, the pinned vLLM's own backends agreeing with it, the rule check refusing before launch,
and no shipped study proposing or exporting a size its GPU's platform refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tuner.errors import UserError
from tuner.results.export import check_deployable
from tuner.runners.plan import study_platform
from tuner.spec.space import check_rules
from tuner.spec.study import StudySpec, load_study_spec
from tuner.spec.vllm_rules import BLOCK_MULTIPLE, CUDA_BACKENDS, block_size_error
from tuner_testing import sim_study, tuner, vllm_run
from tuner_testing.cli import REPO

CUDA_REFUSAL = "No valid attention backend found for cuda"
SPACE = {
    "parameters": {
        "block-size": {"type": "categorical", "choices": [8, 16], "default": 16},
        "max-num-seqs": {"type": "int", "low": 8, "high": 256, "log": True, "default": 256},
    }
}


def test_cuda_takes_multiples_of_16_and_cpu_multiples_of_32() -> None:
    for size in (16, 32, 48, 64, 128, 256):
        assert block_size_error(size, "cuda") is None, size
    for size in (1, 8, 24, 40):
        message = block_size_error(size, "cuda")
        assert message is not None and message.startswith(CUDA_REFUSAL), size
        assert f"block_size={size}," in message and "FLASH_ATTN: [block_size not supported]" in (
            message
        )
    assert block_size_error(32, "cpu") is None and block_size_error(128, "cpu") is None
    # the message the pinned CPU build gave on this box (brief §5)
    assert (
        block_size_error(16, "cpu") == "No common block size for 16 (CPU_ATTN: [MultipleOf(32)])."
    )
    # an unknown platform or size is not checked
    assert block_size_error(8, None) is None and block_size_error(None, "cuda") is None


def test_the_rule_check_refuses_a_block_size_the_platform_refuses() -> None:
    assert CUDA_REFUSAL in (check_rules({"block-size": 8}, 4096, "cuda") or "")
    assert check_rules({"block-size": 8}, 4096, None) is None  # no platform: not checked
    assert check_rules({"block-size": 16}, 4096, "cpu") is not None
    # the block size is checked before the scheduler's rules, each with vLLM's message
    both = {"block-size": 16, "max-num-seqs": 64, "max-num-batched-tokens": 32}
    assert check_rules(both, 4096, "cuda") is not None
    assert "must be greater than or equal to max_num_seqs" in check_rules(both, 4096, "cuda")


def _shipped() -> list[Path]:
    return sorted((REPO / "studies").glob("*.yaml"))


@pytest.mark.parametrize("path", _shipped(), ids=lambda p: p.name)
def test_no_shipped_study_proposes_a_block_size_its_gpu_refuses(path: Path) -> None:
    spec = load_study_spec(path)
    platform = study_platform(spec)
    assert platform in ("cuda", "cpu"), path
    p = spec.search_space.parameters.get("block-size")
    sizes = [*(p.choices or []), p.default] if p is not None else []
    sizes.append(spec.engine.flags.get("block-size"))
    for size in (s for s in sizes if s is not None):
        assert block_size_error(int(size), platform) is None, (path.name, size)


def test_plan_skips_a_refused_block_size_with_vllm_s_message(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    study = sim_study(
        tmp_path, tiny_model_dir, search_space=SPACE, sampler={"name": "random", "seed": 0}
    )
    db = f"sqlite:///{tmp_path / 't.db'}"
    proc = tuner("plan", str(study), "--n-trials", "8", "--storage", db, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stderr.split())
    refused = out.count("not launched (unsupported_block_size): " + CUDA_REFUSAL)
    assert refused >= 1, out
    assert f"{refused} config(s) refused by vLLM's rules, never launched and not counted" in out
    assert "--block-size 8" not in proc.stdout


@pytest.mark.slow  # a two-trial study on the planner: ~4 s on a loaded box
def test_a_refused_block_size_is_recorded_and_the_study_goes_on(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """The CPU study (vLLM's CPU rule: a multiple of 32): block-size 16 is refused before any
    launch, in vLLM's words, recorded, and spends no trial of the budget; the next config is
    measured. The refusal is the pipeline's, before any runner, so the in-process planner
    checks it (moved from tests/test_run_vllm.py, where it cost a real vLLM start; the
    measured trials of the real CPU study are that module's first test)."""
    import optuna

    from tuner.run.loop import StudyLoop
    from tuner.runners.plan import PlanRunner
    from tuner.store.storage import Store
    from tuner_testing import trial_row

    data = yaml.safe_load((REPO / "studies" / "cpu-tiny.yaml").read_text())
    data["search_space"] = yaml.safe_load((REPO / "search_spaces" / "cpu-tiny.yaml").read_text())
    data["search_space"]["parameters"]["block-size"]["choices"] = [16, 32, 64, 128]
    data["engine"]["model"] = str(tiny_model_dir)
    data["workload"].update(num_prompts=16, random_output_len=16, random_range_ratio=0.0)
    path = tmp_path / "cpu-study.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    spec = load_study_spec(path)
    store = Store(f"sqlite:///{tmp_path}/tuner.db")
    loop = StudyLoop(spec, store, PlanRunner(spec), precheck=False)
    good = {
        "max-num-seqs": 8,
        "block-size": 32,
        "max-num-batched-tokens": 1024,
        "enable-chunked-prefill": True,
        "VLLM_CPU_KVCACHE_SPACE": 1,
    }
    loop.study.enqueue_trial({**good, "block-size": 16})
    loop.study.enqueue_trial(good)
    # The refusal uses no trial of the budget (issue 34): one counted trial runs both.
    assert loop.run(n_trials=1).ran == 2
    refused, measured, baseline = loop.study.get_trials()
    assert baseline.state == optuna.trial.TrialState.WAITING  # vLLM's defaults, queued next
    assert refused.user_attrs["failure_kind"] == "unsupported_block_size"
    assert "No common block size for 16" in refused.user_attrs["failure_reason"]
    assert refused.constraints["measured"] == 1.0
    assert measured.user_attrs["completed"] == 16
    # vLLM 0.32's CPU rule (a multiple of 32, tuner.spec.vllm_rules) refuses it before any
    # launch, in vLLM's words: no engine time is spent on it (the log pattern for the same
    # refusal from a started engine is tests/test_engine_failures.py's).
    assert refused.user_attrs["engine_s"] == 0.0
    assert measured.user_attrs["engine_s"] > 0
    assert "precheck_wrong" not in refused.user_attrs | measured.user_attrs
    row = trial_row(store, loop.study.study_name, refused.number)
    assert row is not None and row["outcome"] == "predicted_infeasible"
    store.close()


def test_a_stored_refused_config_is_not_exported(tmp_path: Path, tiny_model_dir: Path) -> None:
    spec = load_study_spec(sim_study(tmp_path, tiny_model_dir, search_space=SPACE))
    with pytest.raises(UserError, match=f"trial 3's config would not start.*{CUDA_REFUSAL}"):
        check_deployable(spec, 3, {"block-size": 8})
    check_deployable(spec, 3, {"block-size": 16})
    cpu = spec.model_copy(update={"hardware": spec.hardware.model_copy(update={"gpu": "cpu"})})
    with pytest.raises(UserError, match="No common block size for 16"):
        check_deployable(cpu, 0, {"block-size": 16})


def test_the_demo_space_offers_only_sizes_cuda_takes() -> None:
    for name in ("vllm-core.yaml", "vllm-shape.yaml"):
        data = yaml.safe_load((REPO / "search_spaces" / name).read_text())
        choices = data["parameters"]["block-size"]["choices"]
        assert 8 not in choices and all(c % BLOCK_MULTIPLE["cuda"] == 0 for c in choices), name


# The pinned vLLM (the CPU build) asked which block sizes its attention backends take: CUDA's
# FLASH_ATTN, TRITON_ATTN and FLEX_ATTENTION import on the CPU build (FLASHINFER needs the
# flashinfer package: its sizes, [16, 32, 64], are read in vllm/v1/attention/backends/
# flashinfer.py), and CPU_ATTN.
_ASK_VLLM = """
import json
from vllm.v1.attention.backends.registry import AttentionBackendEnum as E
out = {}
for name in ("FLASH_ATTN", "TRITON_ATTN", "FLEX_ATTENTION", "CPU_ATTN"):
    cls = E[name].get_class()
    out[name] = [n for n in range(1, 257) if cls.supports_block_size(n)]
out["names"] = [e.name for e in E]
print(json.dumps(out))
"""


@pytest.mark.vllm_env  # starts no vLLM server: not in the real-vLLM group
def test_the_pinned_vllm_s_backends_take_these_block_sizes(vllm_python: Path) -> None:
    done = vllm_run([str(vllm_python), "-c", _ASK_VLLM])
    assert done.returncode == 0, done.stderr
    real = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(CUDA_BACKENDS) <= set(real["names"])
    ours = {
        "cuda": [n for n in range(1, 257) if block_size_error(n, "cuda") is None],
        "cpu": [n for n in range(1, 257) if block_size_error(n, "cpu") is None],
    }
    for name in ("FLASH_ATTN", "TRITON_ATTN", "FLEX_ATTENTION"):
        assert real[name] == ours["cuda"], name
    assert real["CPU_ATTN"] == ours["cpu"]


def test_a_spec_without_a_gpu_has_no_platform() -> None:
    spec = StudySpec.model_validate(
        {"name": "s", "engine": {"model": "m"}, "search_space": SPACE, "workload": {}}
    )
    assert study_platform(spec) is None


def test_check_notes_a_baseline_that_is_not_vllm_s_defaults_on_the_gpu(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    from tuner.run.preflight import defaults_notes

    core = yaml.safe_load((REPO / "search_spaces" / "vllm-core.yaml").read_text())
    h100 = load_study_spec(
        sim_study(tmp_path, tiny_model_dir, search_space=core, hardware={"gpu": "h100", "count": 4})
    )
    # chunked prefill off with a chunk budget under max-model-len: some configs refused
    refused = "vLLM refuses some configs it can draw (12 of the 48 that stand for its ranges"
    note, rules = defaults_notes(h100)
    assert note.startswith("the baseline (trial 0) is not vLLM 0.32.0's defaults on h100: ")
    assert "max-num-seqs 256 (vLLM: 1024), max-num-batched-tokens 2048 (vLLM: 8192)" in note
    assert refused in rules and "is smaller than max_model_len (8192)" in rules
    a6000 = load_study_spec(sim_study(tmp_path, tiny_model_dir, search_space=core))
    assert [n for n in defaults_notes(a6000) if refused not in n] == []
    eight = load_study_spec(sim_study(tmp_path, tiny_model_dir, search_space=SPACE))
    (note,) = defaults_notes(eight)
    assert note.startswith("block-size 8 of the search space: vLLM 0.32.0 refuses it on cuda")
    assert CUDA_REFUSAL in note and "skipped before launch" in note
    proc = tuner("check", "--no-preview", str(tmp_path / "study.yaml"), cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "note: block-size 8 of the search space" in proc.stdout, proc.stdout

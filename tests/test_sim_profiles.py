"""Model and accelerator profiles: built-in shapes, config.json reading, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tuner.errors import UserError
from tuner.sim.profiles import GPUS, GiB, get_gpu, load_model


def test_builtin_32b_shape_gives_the_briefs_figures():
    m = load_model("deepseek-r1-distill-qwen-32b")
    assert m.weight_bytes / 1e9 == pytest.approx(65.5, abs=0.2)
    assert m.weight_bytes_per_gpu(4) / 1e9 == pytest.approx(16.4, abs=0.1)
    assert m.kv_bytes_per_token(1) == 256 * 1024
    assert m.kv_bytes_per_token(4) == 64 * 1024


def test_config_json_is_read_like_vllm(tmp_path, tiny_model_dir):
    m = load_model(str(tiny_model_dir))
    assert (m.num_layers, m.hidden_size, m.num_heads, m.num_kv_heads) == (2, 128, 4, 2)
    assert (m.head_dim, m.intermediate_size, m.dtype_bytes) == (32, 256, 2)
    # head_dim falls back to hidden / heads; kv heads to heads
    cfg = {
        "num_hidden_layers": 4,
        "hidden_size": 256,
        "num_attention_heads": 8,
        "intermediate_size": 512,
        "vocab_size": 1000,
        "torch_dtype": "float16",
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    m = load_model(str(tmp_path))
    assert (m.head_dim, m.num_kv_heads) == (32, 8)


def test_missing_fields_are_named(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 128, "vocab_size": 10}))
    with pytest.raises(UserError, match="num_hidden_layers, num_attention_heads, intermediate"):
        load_model(str(tmp_path))


def test_unknown_model_and_gpu_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="neither a built-in name"):
        load_model(str(tmp_path / "nope"))
    with pytest.raises(UserError, match="unknown GPU 'v100'"):
        get_gpu("v100")


def test_gpu_table_covers_the_issue():
    for name in ("a6000", "a100-80g", "h100", "h200", "l40s", "t4", "cpu"):
        gpu = get_gpu(name.upper())
        assert gpu.memory_bytes > 8 * GiB and gpu.bandwidth_bytes_s > 0 and gpu.flops > 0
    assert GPUS["a6000"].bandwidth_bytes_s == 768e9
    pcie, sxm = GPUS["h100-pcie"], GPUS["h100"]  # the PCIe card is its own, slower part
    assert (pcie.bandwidth_bytes_s, pcie.flops) == (2000e9, 756e12)
    assert pcie.bandwidth_bytes_s < sxm.bandwidth_bytes_s and pcie.flops < sxm.flops
    assert GPUS["cpu"].platform == "cpu"
    # the A100 80GB's memory as CUDA reports it (vLLM sizes its cache from
    # torch.cuda.mem_get_info's total), 79.15 GiB, not nvidia-smi's 81920 MiB
    assert round(GPUS["a100-80g"].memory_bytes / GiB, 2) == 79.15
    # the H100 80GB's likewise: 79.11 GiB (vLLM issue #27508's H100 80GB HBM3), not
    # nvidia-smi's 81559 MiB; the PCIe card has the same 80 GB
    assert round(sxm.memory_bytes / GiB, 2) == round(pcie.memory_bytes / GiB, 2) == 79.11


def test_an_a100_pcie_host_without_p2p_pays_its_all_reduce_through_host_memory():
    """Issue 45: dennislee22's TP=2 A100s (no GPU P2P) were run on the SXM card's NVLink."""
    from tuner.sim.steptime import StepCostModel

    model = load_model("deepseek-r1-0528-qwen3-8b")
    decode = {"num_tokens": 256, "num_seqs": 256, "num_sampled": 256, "attn_pairs": 0.0}

    def step_s(gpu: str, tp: int) -> float:
        return StepCostModel(model, GPUS[gpu], tp).step_time(**decode, kv_tokens=256 * 1024)

    # one GPU: the PCIe card reads its weights at 1935 GB/s, the SXM's 2039; P2P is moot
    assert step_s("a100-pcie", 1) == step_s("a100-pcie-nop2p", 1) > step_s("a100-80g", 1)
    # two: NVLink, then PCIe peer to peer, then through host memory
    assert step_s("a100-80g", 2) < step_s("a100-pcie", 2) < step_s("a100-pcie-nop2p", 2)
    # 2 calls a layer, each 90 us and 256 tokens' hidden states at 16 GB/s: ~13 ms a step more
    host = step_s("a100-pcie-nop2p", 2) - step_s("a100-pcie", 2)
    expected = 2 * 36 * ((90e-6 - 30e-6) + 256 * 4096 * 2 * (1 / 16e9 - 1 / 32e9))
    assert host == pytest.approx(expected)
    assert get_gpu("A100-PCIE-NOP2P").constants == GPUS["a100-80g"].constants


def test_the_h100_nvl_is_its_own_card():
    """Issue 45: vLLM #17788's H100 NVL ran on the SXM profile, and the fit slowed every SXM
    case to explain it. The NVL reads faster and computes slower than the SXM."""
    nvl, sxm = GPUS["h100-nvl"], GPUS["h100"]
    assert (nvl.bandwidth_bytes_s, nvl.flops) == (3900e9, 835e12)
    assert nvl.bandwidth_bytes_s > sxm.bandwidth_bytes_s and nvl.flops < sxm.flops
    assert nvl.memory_bytes > sxm.memory_bytes and nvl.constants == sxm.constants


# Profile files --------------------------------------------------------------------------


def _demo_workload():
    from tuner.sim.fit import SimWorkload
    from tuner.workload.schedule import arrival_times

    n = 32
    return SimWorkload(
        prompt_lens=tuple(256 + 37 * (i % 9) for i in range(n)),
        output_lens=tuple(64 + 11 * (i % 7) for i in range(n)),
        arrival_s=tuple(float(t) for t in arrival_times(n, 8.0, 1.0, 0)),
    )


def _figures(gpu, flags=None):
    from tuner.sim.fit import predict

    model = load_model("deepseek-r1-distill-qwen-32b")
    flags = {"tensor-parallel-size": 4, "max-model-len": 8192, **(flags or {})}
    return predict(model, gpu, flags, _demo_workload())


@pytest.mark.parametrize("name", sorted(GPUS))
def test_a_builtin_profile_round_trips_through_a_file(tmp_path, name):
    from tuner.sim.profile_file import load_gpu, write_profile

    path = tmp_path / f"{name}.yaml"
    write_profile(GPUS[name], path)
    assert load_gpu(str(path)) == GPUS[name]  # every figure and constant, bit for bit


def test_a_profile_file_gives_the_builtins_simulation(tmp_path):
    from tuner.sim.profile_file import load_gpu, write_profile

    path = tmp_path / "a6000.yaml"
    write_profile(GPUS["a6000"], path)
    assert _figures(load_gpu(str(path))) == _figures(GPUS["a6000"])


def test_a_file_written_before_attention_had_its_own_efficiency_still_reads(tmp_path):
    """`tuner calibrate` wrote profiles without `attention_efficiency`: such a file reads as
    the model it was fitted under (attention at the GEMM efficiency), not a refusal."""
    import re

    from tuner.sim.profile_file import load_gpu, profile_to_yaml

    text = profile_to_yaml(GPUS["h100"])
    old = re.sub(r"\n *attention_efficiency: [^\n]*", "", text)
    assert "attention_efficiency" not in old
    (tmp_path / "old.yaml").write_text(old)
    c = load_gpu(str(tmp_path / "old.yaml")).constants
    assert c.attention_efficiency == c.flops_efficiency == GPUS["h100"].constants.flops_efficiency


def test_a_perturbed_file_moves_the_figures_the_expected_way(tmp_path):
    from tuner.sim.profile_file import load_gpu, profile_to_yaml

    text = profile_to_yaml(GPUS["a6000"])
    text = text.replace("bandwidth_bytes_s: 768000000000.0", "bandwidth_bytes_s: 576000000000.0")
    text = text.replace("step_overhead_s: 0.001\n", "step_overhead_s: 0.005\n")
    (tmp_path / "slow.yaml").write_text(text)
    slow = load_gpu(str(tmp_path / "slow.yaml"))
    assert slow.bandwidth_bytes_s == 0.75 * 768e9 and slow.constants.step_overhead_s == 5e-3
    stock, slower = _figures(GPUS["a6000"]), _figures(slow)
    assert slower["mean_tpot_ms"] > 1.2 * stock["mean_tpot_ms"]  # decode is bandwidth bound
    assert slower["p99_ttft_ms"] > stock["p99_ttft_ms"]
    assert slower["output_throughput"] < stock["output_throughput"]


def test_sim_profile_prints_a_file_that_sim_serve_and_the_study_accept(tmp_path):
    from tuner.spec.study import load_study_spec
    from tuner_testing import sim_study, tuner

    out = tuner("sim", "profile", "H100", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "bandwidth_bytes_s: 3350000000000.0" in out.stdout and "constants:" in out.stdout
    (tmp_path / "h100.yaml").write_text(out.stdout)
    study = sim_study(tmp_path, tmp_path, hardware={"profile": "h100.yaml", "count": 4})
    spec = load_study_spec(study)
    assert spec.hardware.accelerator == str(tmp_path / "h100.yaml")
    from tuner.runners.plan import PlanRunner
    from tuner.sim.profile_file import load_gpu

    assert load_gpu(spec.hardware.accelerator) == GPUS["h100"]
    assert PlanRunner(spec).gpu == GPUS["h100"]  # what `tuner plan` simulates on


_BAD_FILES = [
    ("absent", None, "profile file not found"),
    ("unknown key", ("platform: cuda", "platform: cuda\nbandwith_bytes_s: 1.0"), "unknown key"),
    ("missing constant", ("  step_overhead_s: 0.001\n", ""), "constants.step_overhead_s: Field"),
    ("negative bandwidth", ("768000000000.0", "-768000000000.0"), "bandwidth_bytes_s: Input"),
    ("efficiency > 1", ("bandwidth_efficiency: 0.88", "bandwidth_efficiency: 8.8"), "less than"),
    ("not a number", ("flops: 154800000000000.0", "flops: fast"), "flops: Input should be"),
    ("not a mapping", ("", "- a\n- b\n"), "must be a YAML mapping"),
]


@pytest.mark.parametrize(("what", "edit", "message"), _BAD_FILES, ids=[b[0] for b in _BAD_FILES])
def test_bad_profile_files_are_one_line(tmp_path, what, edit, message):
    from tuner.sim.profile_file import load_gpu, profile_to_yaml

    path = tmp_path / "gpu.yaml"
    if edit is not None:
        old, new = edit
        text = profile_to_yaml(GPUS["a6000"])
        path.write_text(text.replace(old, new, 1) if old else new)
    with pytest.raises(UserError, match=message) as err:
        load_gpu(str(path))
    assert "\n" not in str(err.value) and str(path) in str(err.value)


def test_bad_profile_files_exit_2_from_the_cli(tmp_path):
    from tuner_testing import tuner

    (tmp_path / "gpu.yaml").write_text("name: x\nplatform: cuda\n")
    for args in (
        ["sim", "serve", "tiny-qwen2", "--gpu", "gpu.yaml"],
        ["sim", "serve", "tiny-qwen2", "--gpu", "missing.yaml"],
        ["sim", "profile", "v100"],
    ):
        out = tuner(*args, cwd=tmp_path, timeout=60)
        assert out.returncode == 2, (args, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


def test_attention_has_its_own_efficiency():
    """A slower attention lengthens a long-context step far more than a short one; GEMM-only
    work (no context) does not move; the closed-form decode run follows step_time."""
    from tuner.sim.profiles import BUILTIN_MODELS
    from tuner.sim.steptime import StepCostModel

    model, gpu = BUILTIN_MODELS["deepseek-r1-distill-qwen-32b"], GPUS["a100-80g"]
    base = StepCostModel(model, gpu, 1)
    slow = StepCostModel(model, gpu.with_constants(attention_efficiency=0.3), 1)

    def step(cost, cached):  # one 2048-token prefill chunk after `cached` tokens
        pairs = 2048 * (cached + 2049 / 2)
        return cost.step_time(2048, 1, 1, pairs, cached + 2048)

    short, long = step(slow, 0) / step(base, 0), step(slow, 30000) / step(base, 30000)
    assert 1.0 < short < 1.05 and long > 1.3
    assert slow.step_time(2048, 1, 1, 0.0, 0) == base.step_time(2048, 1, 1, 0.0, 0)
    run = slow.decode_run_times(3, 4, 4 * 8000)
    assert run[0] == pytest.approx(slow.step_time(4, 4, 4, 4 * 8001, 4 * 8001))


def test_hopper_profiles_carry_their_fitted_constants():
    hopper = {GPUS[n].constants for n in ("h100", "h100-pcie", "h200")}
    assert len(hopper) == 1 and hopper != {GPUS["a100-80g"].constants}
    (c,) = hopper
    # refitted on GPUStack's H100 runs read as the PCIe card (their decode ITLs), 5 Dec 2026
    assert (c.flops_efficiency, c.attention_efficiency) == (0.40, 0.52)


# One step of the published runs, read off their inter-token latencies (the quoted sources in
# benchmarks/published/cases.yaml; docs/simulator.md "How close (real GPUs)"):
# (case's model, profile, tokens, seqs, attention pairs, KV tokens read, published step ms)
_PUBLISHED_STEPS = [
    # ld-singh A6000, Qwen2.5-7B, 8 streams of ~50-token chats: median TPOT 23.2 ms
    ("qwen2.5-7b-instruct", "a6000", 8, 8, 8 * 65, 8 * 65, 23.2),
    # GPUStack A100, random 32k: median ITL 48.55 ms, one request decoding beside its 32k
    ("qwen3-32b", "a100-80g", 1, 1, 32000, 32000, 48.55),
    # GPUStack A100, random 4k: median ITL 51.55 ms, ~10 requests decoding at ~4.1k
    ("qwen3-32b", "a100-80g", 10, 10, 10 * 4100, 10 * 4100, 51.55),
    # GPUStack A100, random 128 x 1000: median ITL 543 ms, 2048 prompt tokens (16 prompts)
    ("qwen3-32b", "a100-80g", 2048, 16, 16 * 128 * 129 / 2, 2048, 543.2),
    # GPUStack "H100" (read as PCIe), random 4k: median ITL 43.4 ms, ~9 decoding at ~4.1k
    ("qwen3-32b", "h100-pcie", 9, 9, 9 * 4100, 9 * 4100, 43.38),
]


@pytest.mark.parametrize(("model", "gpu", "tokens", "seqs", "pairs", "kv", "ms"), _PUBLISHED_STEPS)
def test_a_step_takes_what_the_published_runs_measured(model, gpu, tokens, seqs, pairs, kv, ms):
    """The profiles' constants against single steps of real GPUs (within 5 %): decode on the
    A6000 (bandwidth 0.88, 1 ms step), A100 decode and prefill, the H100 PCIe's decode."""
    import yaml

    from tuner.sim.profiles import model_from_config
    from tuner.sim.steptime import StepCostModel

    cases = Path(__file__).resolve().parent.parent / "benchmarks" / "published" / "cases.yaml"
    shape = model_from_config(yaml.safe_load(cases.read_text())["models"][model])
    step_s = StepCostModel(shape, GPUS[gpu], 1).step_time(tokens, seqs, seqs, pairs, kv)
    assert step_s * 1e3 == pytest.approx(ms, rel=0.05)

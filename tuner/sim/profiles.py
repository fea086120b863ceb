"""Model and accelerator profiles: the shapes and datasheet figures the simulator runs on.

A model profile comes from a Hugging Face `config.json` or a built-in name (`known_model`:
whether the simulator has one for a study's model); an accelerator profile from a built-in
table whose sources are listed in docs/simulator.md.
The step-time constants are part of an accelerator profile, so they live here and
steptime.py imports this module (never the other way).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tuner.errors import UserError
from tuner.spec.model_source import hub_cache_dir, model_config

GiB = 1024**3
_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}


@dataclass(frozen=True, slots=True)
class ModelProfile:
    """The shape of a decoder-only transformer (Llama/Qwen2 family), as vLLM sees it."""

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    dtype_bytes: int = 2
    max_position_embeddings: int = 32768
    tie_word_embeddings: bool = False

    @property
    def layer_params(self) -> int:
        """Weights of one layer: q, k, v, o projections and the gated MLP."""
        attn = self.hidden_size * self.head_dim * (2 * self.num_heads + 2 * self.num_kv_heads)
        return attn + 3 * self.hidden_size * self.intermediate_size

    @property
    def embedding_params(self) -> int:
        """Input embedding plus LM head (one matrix when they are tied)."""
        copies = 1 if self.tie_word_embeddings else 2
        return copies * self.vocab_size * self.hidden_size

    @property
    def param_count(self) -> int:
        return self.num_layers * self.layer_params + self.embedding_params

    @property
    def weight_bytes(self) -> int:
        return self.param_count * self.dtype_bytes

    def weight_bytes_per_gpu(self, tp: int) -> int:
        """Linear layers and the vocab are split across TP ranks; norms are negligible."""
        return -(-self.weight_bytes // tp)

    def kv_heads_per_gpu(self, tp: int) -> int:
        """vLLM replicates KV heads when there are fewer of them than TP ranks."""
        return max(1, self.num_kv_heads // tp)

    def kv_bytes_per_token(self, tp: int) -> int:
        """K and V, every layer, this rank's KV heads: 2*layers*kv_heads/TP*head_dim*dtype."""
        return 2 * self.num_layers * self.kv_heads_per_gpu(tp) * self.head_dim * self.dtype_bytes


@dataclass(frozen=True, slots=True)
class StepTimeConstants:
    """Every tunable constant of the step-time model, with the reason for its default."""

    # Share of peak tensor FLOP/s that large prefill GEMMs reach (MFU of vLLM prefill).
    flops_efficiency: float = 0.6
    # Share of peak tensor FLOP/s that attention (FlashAttention over the KV cache) reaches.
    attention_efficiency: float = 0.6
    # Share of peak memory bandwidth that decode GEMVs reach: a band, 0.8-0.9 in the
    # published runs; 0.88 is the A6000's batch-8 decode of a 7B model (docs/simulator.md,
    # "How close (real GPUs)"), with the 1 ms step below.
    bandwidth_efficiency: float = 0.88
    # Fixed cost of a step: scheduler, input preparation, kernel launches (CUDA graphs).
    step_overhead_s: float = 1.0e-3
    # Per request in the batch: sampling, output processing, detokenising, streaming.
    per_seq_overhead_s: float = 25e-6
    # Per scheduled token: input preparation and non-GEMM kernels (norms, rotary, copy).
    per_token_overhead_s: float = 0.0
    # The API server's work per request that it does one request at a time (its one asyncio
    # process: parsing, the chat template, handing the request to the engine core): a burst
    # reaches the engine at 1 / request_overhead_s requests per second. A host constant
    # (docs/simulator.md, "The API server's front end"). Adds to TTFT only.
    request_overhead_s: float = 2e-3
    # The front end's latency per request that requests do not queue for (tokenising off the
    # event loop, the ZMQ hop to the engine core and back, detokenising, the SSE write): added
    # to every request's way to the engine, after the queue above. A host constant; 0 keeps
    # the model as it was before issue 45.
    frontend_latency_s: float = 0.0
    # The API server's work per streamed chunk (one request's new token: detokenising, the
    # SSE event built and written), on the thread that also admits requests, which it takes
    # first (`tuner.sim.frontend`): many streams slow a burst's admission, and past the
    # thread's pace the client reads tokens slower than the engine makes them. A host
    # constant; 0 keeps the model as it was before issue 45's ninth source.
    stream_chunk_s: float = 0.0
    # GEMM efficiency as a function of matrix size (`steptime.gemm_efficiency`): a step of n
    # tokens through a model of hidden size d reaches flops_efficiency * n / (n + half_tokens)
    # * d / (d + half_hidden) of the peak. 0 (both): one efficiency whatever the size.
    gemm_half_tokens: float = 0.0
    gemm_half_hidden: float = 0.0
    # The least time one layer's kernels take in a step however small their work (launch and
    # synchronisation latency inside a CUDA graph): a step's roofline is at least layers x this
    # (`steptime.layer_floor`). Binds only on small models' decode steps; 0: no floor.
    layer_floor_s: float = 0.0


@dataclass(frozen=True, slots=True)
class GpuProfile:
    """One accelerator's datasheet figures, per device. `platform` picks vLLM's rules."""

    name: str
    memory_bytes: int
    bandwidth_bytes_s: float  # peak memory bandwidth
    flops: float  # dense bf16 tensor FLOP/s (no sparsity)
    interconnect_bytes_s: float  # per-direction bandwidth between devices for all-reduce
    allreduce_latency_s: float  # fixed cost of one all-reduce call at TP > 1
    platform: str = "cuda"  # "cuda" or "cpu": block-size rules and flag defaults
    description: str = ""
    constants: StepTimeConstants = field(default_factory=StepTimeConstants)

    def with_constants(self, **changes: float) -> GpuProfile:
        """A copy with some step-time constants replaced (for fitting and what-ifs)."""
        return replace(self, constants=replace(self.constants, **changes))


BUILTIN_MODELS: dict[str, ModelProfile] = {
    "deepseek-r1-distill-qwen-32b": ModelProfile(
        name="deepseek-r1-distill-qwen-32b",
        num_layers=64,
        hidden_size=5120,
        num_heads=40,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=27648,
        vocab_size=152064,
        max_position_embeddings=131072,
    ),
    "deepseek-r1-0528-qwen3-8b": ModelProfile(
        name="deepseek-r1-0528-qwen3-8b",
        num_layers=36,
        hidden_size=4096,
        num_heads=32,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=12288,
        vocab_size=151936,
        max_position_embeddings=131072,
    ),
    "tiny-qwen2": ModelProfile(
        name="tiny-qwen2",
        num_layers=2,
        hidden_size=128,
        num_heads=4,
        num_kv_heads=2,
        head_dim=32,
        intermediate_size=256,
        vocab_size=1024,
        max_position_embeddings=4096,
    ),
}

# Hopper (H100, H200): fitted on the published suite's GPUStack H100 runs (vLLM 0.11, Qwen3-32B,
# on the h100-pcie profile: their decode reads as the PCIe card; benchmarks/published_fit.py,
# docs/simulator.md "How close (real GPUs)"): its GEMMs reach about 0.40 of the datasheet's
# dense peak, attention about 0.52. Decode: the default's constants give the runs' median ITL
# (43-45 ms) on the PCIe card's 2.0 TB/s.
HOPPER = StepTimeConstants(flops_efficiency=0.40, attention_efficiency=0.52)

# A100: read off GPUStack's published A100 runs' inter-token latencies (vLLM 0.11, Qwen3-32B,
# docs/simulator.md "How close (real GPUs)"): a step of 2048 prompt tokens of 128-token
# prompts takes 543 ms (median ITL of the 128-token run): its GEMMs reach 0.76 of the dense
# peak; a decode step beside one 32k context takes 48.6 ms (median ITL of the 32k run): 74 GB
# read at 0.76 of the bandwidth plus the 1 ms step; the 32k prompts' prefill, the rest of that
# run's 1784 s, puts attention at 0.63.
AMPERE_SXM = StepTimeConstants(
    flops_efficiency=0.76, attention_efficiency=0.63, bandwidth_efficiency=0.76
)

# What CUDA reports on an H100 80GB (79.11 GiB; nvidia-smi shows 81559 MiB), which vLLM sizes its
# cache from, as on the A100 below (docs/simulator.md, "Accelerator profiles").
H100_CUDA_TOTAL_BYTES = 81009 * 2**20

# The A100 PCIe card (A100 80GB PCIe): HBM2e at 1.935 TB/s, the SXM card's 312 dense bf16
# TFLOP/s (at 300 W, not 400: its clocks sag sooner under load), and without an NVLink bridge
# its all-reduce goes over PCIe 4.0 x16 (32 GB/s per direction) peer to peer, at the
# NCCL-over-PCIe latency of the other PCIe profiles. Memory as the SXM card's (the same 80 GB,
# the same CUDA total: assumed).
A100_PCIE = GpuProfile(
    "a100-pcie",
    81050 * 2**20,
    1935e9,
    312e12,
    32e9,
    30e-6,
    description="A100 80GB PCIe",
    constants=AMPERE_SXM,
)

# Figures per device from the vendors' datasheets; sources in docs/simulator.md.
# Memory is what the driver reports (nvidia-smi MiB), not the marketing GB; the A100 80GB's is
# what CUDA reports, which vLLM sizes its cache from (docs/simulator.md, "Accelerator profiles").
GPUS: dict[str, GpuProfile] = {
    "a6000": GpuProfile(
        "a6000", 49140 * 2**20, 768e9, 154.8e12, 32e9, 30e-6, description="RTX A6000, PCIe 4.0"
    ),
    "a100-80g": GpuProfile(
        "a100-80g",
        81050 * 2**20,  # what CUDA reports (79.15 GiB); nvidia-smi shows 81920 MiB
        2039e9,
        312e12,
        300e9,
        10e-6,
        description="A100 80GB SXM",
        constants=AMPERE_SXM,
    ),
    "a100-pcie": A100_PCIE,
    # The same card where the host gives the GPUs no peer-to-peer access (most cloud VMs; vLLM
    # logs "Custom allreduce is disabled because your platform lacks GPU P2P capability"): NCCL
    # stages every all-reduce through host memory, so each byte crosses PCIe 4.0 twice (device
    # to host, host to device: half the link's 32 GB/s per direction) and each call pays two
    # host-memory hand-offs (3x the P2P latency). Figures reasoned from the link, not fitted
    # (docs/simulator.md, "Accelerator profiles").
    "a100-pcie-nop2p": replace(
        A100_PCIE,
        name="a100-pcie-nop2p",
        interconnect_bytes_s=16e9,
        allreduce_latency_s=90e-6,
        description="A100 80GB PCIe, no P2P (all-reduce through host memory)",
    ),
    "h100": GpuProfile(
        "h100",
        H100_CUDA_TOTAL_BYTES,
        3350e9,
        989e12,
        450e9,
        8e-6,
        description="H100 SXM5 80GB",
        constants=HOPPER,
    ),
    # The PCIe card: HBM2e at 2.0 TB/s, 114 SMs (756 dense bf16 TFLOP/s against the SXM's 989),
    # and without an NVLink bridge its all-reduce goes over PCIe 5.0 (64 GB/s per direction).
    "h100-pcie": GpuProfile(
        "h100-pcie",
        H100_CUDA_TOTAL_BYTES,
        2000e9,
        756e12,
        64e9,
        20e-6,
        description="H100 PCIe 80GB",
        constants=HOPPER,
    ),
    # The H100 NVL (two PCIe cards with an NVLink bridge): 94 GB of HBM3 at 3.9 TB/s, 835 dense
    # bf16 TFLOP/s (1671 sparse), NVLink 600 GB/s (300 per direction). Memory: nvidia-smi's
    # figure as users report it (95830 MiB; its CUDA total not found).
    "h100-nvl": GpuProfile(
        "h100-nvl",
        95830 * 2**20,
        3900e9,
        835e12,
        300e9,
        8e-6,
        description="H100 NVL 94GB",
        constants=HOPPER,
    ),
    "h200": GpuProfile(
        "h200",
        143771 * 2**20,
        4800e9,
        989e12,
        450e9,
        8e-6,
        description="H200 SXM 141GB",
        constants=HOPPER,
    ),
    "l40s": GpuProfile(
        "l40s", 46068 * 2**20, 864e9, 362e12, 32e9, 30e-6, description="L40S, PCIe 4.0"
    ),
    "t4": GpuProfile(
        "t4", 15360 * 2**20, 320e9, 65e12, 16e9, 40e-6, description="T4 (fp16), PCIe 3.0"
    ),
    # The CPU build of vLLM on one pinned core of this project's CI machines (tiny model):
    # step constants and FLOP/s fitted by benchmarks/sim_fidelity.py, not a datasheet.
    # Memory and bandwidth are nominal (VLLM_CPU_KVCACHE_SPACE sizes the cache).
    "cpu": GpuProfile(
        "cpu",
        16 * GiB,
        10e9,
        9.68e10,
        10e9,
        50e-6,
        platform="cpu",
        description="vLLM CPU build, 1 pinned core (fitted)",
        constants=StepTimeConstants(
            flops_efficiency=1.0,
            attention_efficiency=1.0,
            bandwidth_efficiency=1.0,
            step_overhead_s=2.59e-3,
            per_seq_overhead_s=0.075e-3,
            per_token_overhead_s=0.0,
            request_overhead_s=5.06e-3,
        ),
    ),
}


def get_gpu(name: str) -> GpuProfile:
    """The built-in accelerator profile `name` (case-insensitive)."""
    key = name.strip().lower()
    if key not in GPUS:
        raise UserError(
            f"unknown GPU {name!r}; known: {', '.join(sorted(GPUS))}, or a profile file "
            "(FILE.yaml; `tuner sim profile NAME` writes one to start from)"
        )
    return GPUS[key]


def load_model(name_or_dir: str | Path) -> ModelProfile:
    """A built-in model name, or a directory (or file) holding a HF config.json."""
    key = str(name_or_dir).strip()
    if key.lower() in BUILTIN_MODELS:
        return BUILTIN_MODELS[key.lower()]
    path = Path(key)
    config = path / "config.json" if path.is_dir() else path
    if not config.is_file():  # a hub id: its cached snapshot's (tuner.spec.model_source)
        config = model_config(key) or config
    if not config.is_file():
        raise UserError(
            f"model {key!r} is neither a built-in name ({', '.join(sorted(BUILTIN_MODELS))}), "
            f"a directory with config.json, nor a hub id cached in {hub_cache_dir()}"
        )
    try:
        data = json.loads(config.read_text())
    except (OSError, ValueError) as exc:  # JSON or UTF-8 decoding
        raise UserError(f"{config}: cannot read config.json: {exc}") from None
    if not isinstance(data, dict):
        raise UserError(f"{config}: config.json is not a JSON object")
    name = path.name if path.is_dir() else config.parent.name if config == path else key
    return model_from_config(data, name=name)


def known_model(model: str | Path) -> ModelProfile | None:
    """The simulator's profile of `model` (`load_model`), None when it has none.

    A model the simulator cannot read (a hub id not in the local cache, another engine's own
    name, a config.json of a shape it does not model) stops nothing on a real engine: the
    estimates that need its shape (the memory precheck, the night's cost, prediction skips, the
    multi-fidelity screen, the start-up estimate) are unknown, said once (`unknown_model_note`),
    and the engine decides. Only the simulated engine and `tuner plan`, which are the simulator,
    refuse it (`load_model`'s one line).
    """
    try:
        return load_model(model)
    except UserError:
        return None


def unknown_model_note(model: str) -> str | None:
    """The one line that says the estimates are unknown, or None when the model is known."""
    try:
        load_model(model)
    except UserError as exc:
        return (
            f"engine.model: unknown to the simulator ({exc}): no memory precheck, night's "
            "cost, prediction skips or screen for this study; the engine decides"
        )
    return None


def model_from_config(data: dict[str, Any], name: str = "model") -> ModelProfile:
    """Read the fields vLLM uses from a HF config dict; missing ones are named."""
    data = {**data.get("text_config", {}), **data}
    required = [
        "num_hidden_layers",
        "hidden_size",
        "num_attention_heads",
        "intermediate_size",
        "vocab_size",
    ]
    missing = [k for k in required if not isinstance(data.get(k), int) or data[k] <= 0]
    if missing:
        raise UserError(f"config.json of {name} lacks needed fields: {', '.join(missing)}")
    heads = data["num_attention_heads"]
    head_dim = data.get("head_dim") or data["hidden_size"] // heads
    dtype = str(data.get("torch_dtype") or data.get("dtype") or "bfloat16")
    if dtype not in _DTYPE_BYTES:
        raise UserError(f"config.json of {name}: unsupported dtype {dtype!r}")
    return ModelProfile(
        name=name,
        num_layers=data["num_hidden_layers"],
        hidden_size=data["hidden_size"],
        num_heads=heads,
        num_kv_heads=data.get("num_key_value_heads") or heads,
        head_dim=int(head_dim),
        intermediate_size=data["intermediate_size"],
        vocab_size=data["vocab_size"],
        dtype_bytes=_DTYPE_BYTES[dtype],
        max_position_embeddings=int(data.get("max_position_embeddings") or 32768),
        tie_word_embeddings=bool(data.get("tie_word_embeddings", False)),
    )

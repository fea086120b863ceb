"""Accelerator profiles as YAML files: every datasheet figure and step-time constant named.

A file holds exactly the fields of `GpuProfile` and `StepTimeConstants`, in their own units
(bytes, bytes/s, FLOP/s, seconds), so a built-in profile written out and read back is the
same profile bit for bit (PyYAML writes floats with `repr`). Every field is required and
no other key is accepted: a file states the whole model, and a typo is an error, not a
silently kept default. The format is documented in docs/simulator.md ("Profile files").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Literal

import yaml
from pydantic import ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from tuner.errors import UserError
from tuner.sim.profiles import GPUS, GpuProfile, StepTimeConstants, get_gpu
from tuner.spec.inputs import NoBoolNumbers
from tuner.spec.outputs import Kept, write_output_file
from tuner.spec.parsing import describe_validation_error, read_yaml_mapping

MAX_OVERHEAD_S = 10.0  # a fixed cost of seconds per step is a unit mistake (ms for s)
# Physical bounds of each figure, in the file's units, with the words of the refusal. Far
# wider than any accelerator's datasheet (T4 to B200, and a CPU), far narrower than a unit
# mistake: 768 for a bandwidth (GB/s for bytes/s) or 1e-300 for anything overflows the
# simulator (a step of 1e300 seconds, a KV cache of 1e300 blocks).
BOUNDS: dict[str, tuple[float, float, str]] = {
    "memory_bytes": (2**30, 2**44, "bytes (1 GiB to 16 TiB)"),
    "bandwidth_bytes_s": (1e10, 1e14, "bytes/s (10 GB/s to 100 TB/s)"),
    "flops": (1e10, 1e17, "FLOP/s (10 GFLOP/s to 100 PFLOP/s)"),
    "interconnect_bytes_s": (1e8, 1e14, "bytes/s (100 MB/s to 100 TB/s)"),
    "allreduce_latency_s": (0.0, 1.0, "seconds (0 to 1 s)"),
    "flops_efficiency": (0.01, 1.0, "(a share of the peak)"),
    "attention_efficiency": (0.01, 1.0, "(a share of the peak)"),
    "bandwidth_efficiency": (0.01, 1.0, "(a share of the peak)"),
    "frontend_latency_s": (0.0, 10.0, "seconds (0 to 10 s)"),
    "stream_chunk_s": (0.0, 0.1, "seconds (0 to 0.1 s)"),
    "gemm_half_tokens": (0.0, 1e6, "tokens (0 to 1,000,000)"),
    "gemm_half_hidden": (0.0, 1e6, "hidden units (0 to 1,000,000)"),
    "layer_floor_s": (0.0, 1.0, "seconds (0 to 1 s)"),
}
MIN_OVERHEAD_S = 1e-9  # a cost per step, request or token: 0, or 1 ns to MAX_OVERHEAD_S
HEADER = (
    "# An accelerator profile for tuner's simulator (docs/simulator.md, 'Profile files').\n"
    "# Units: bytes, bytes/s, FLOP/s, seconds. Use it as `hardware.profile: FILE` in a\n"
    "# study file or `tuner sim serve --gpu FILE`.\n"
)


class _Strict(NoBoolNumbers):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="after")
    @classmethod
    def _physical(cls, v: object, info: ValidationInfo) -> object:
        """Each figure within physical bounds, the bound and the unit in the refusal."""
        name = info.field_name or ""
        if name in BOUNDS and isinstance(v, int | float):
            low, high, unit = BOUNDS[name]
            if not low <= v <= high:
                raise ValueError(f"{v:g} is outside {low:g} to {high:g} {unit}")
        if name.endswith("overhead_s") and isinstance(v, float) and 0 < v < MIN_OVERHEAD_S:
            raise ValueError(f"{v:g} seconds: give 0, or {MIN_OVERHEAD_S:g} to {MAX_OVERHEAD_S:g}")
        return v


class ConstantsFile(_Strict):
    """`StepTimeConstants`, every one required but `attention_efficiency` and issue 45's four:
    a file written before attention had its own efficiency reads as the model it was fitted
    under (attention at `flops_efficiency`), one written before issue 45 with those parts off."""

    flops_efficiency: float = Field(gt=0, le=1)
    attention_efficiency: float | None = Field(default=None, gt=0, le=1)
    bandwidth_efficiency: float = Field(gt=0, le=1)
    step_overhead_s: float = Field(ge=0, le=MAX_OVERHEAD_S)
    per_seq_overhead_s: float = Field(ge=0, le=MAX_OVERHEAD_S)
    per_token_overhead_s: float = Field(ge=0, le=MAX_OVERHEAD_S)
    request_overhead_s: float = Field(ge=0, le=MAX_OVERHEAD_S)
    # issue 45's model parts: optional, a file written before them reads as the model it was
    # made under (each at 0: off)
    frontend_latency_s: float = 0.0
    stream_chunk_s: float = 0.0
    gemm_half_tokens: float = 0.0
    gemm_half_hidden: float = 0.0
    layer_floor_s: float = 0.0


class ProfileFile(_Strict):
    """`GpuProfile`, every field but `description` required."""

    name: str = Field(min_length=1, max_length=128)
    description: str = ""
    platform: Literal["cuda", "cpu"]
    memory_bytes: int = Field(gt=0)
    bandwidth_bytes_s: float = Field(gt=0)
    flops: float = Field(gt=0)
    interconnect_bytes_s: float = Field(gt=0)
    allreduce_latency_s: float = Field(ge=0, le=MAX_OVERHEAD_S)
    constants: ConstantsFile

    def to_profile(self) -> GpuProfile:
        fields = self.model_dump(exclude={"constants"})
        constants = self.constants.model_dump()
        if constants["attention_efficiency"] is None:
            constants["attention_efficiency"] = constants["flops_efficiency"]
        return GpuProfile(**fields, constants=StepTimeConstants(**constants))


def profile_to_yaml(gpu: GpuProfile) -> str:
    """The profile as a file's text (validated first, so what is written can be read back)."""
    data = asdict(gpu)
    try:
        ProfileFile.model_validate(data)
    except ValidationError as exc:  # a fit pushed past a bound (fitting a fitted profile)
        raise UserError(f"profile {gpu.name}: {describe_validation_error(exc)}") from None
    order = list(ProfileFile.model_fields)
    text = yaml.safe_dump({k: data[k] for k in order}, sort_keys=False, allow_unicode=True)
    return HEADER + text


def write_profile(
    gpu: GpuProfile,
    path: str | Path,
    what: str = "profile file",
    *,
    force: bool = False,
    keep: Sequence[Kept] = (),
) -> None:
    """The profile to a file, as `tuner.spec.outputs` writes every output (an existing file
    only with `force`, never one of `keep`); a bad path is one line."""
    write_output_file(path, profile_to_yaml(gpu), what, force=force, keep=keep)


def read_profile(path: str | Path) -> GpuProfile:
    """A profile file; a missing file, bad YAML or a bad field is one UserError line."""
    path = Path(path)
    data = read_yaml_mapping(path, "profile file")
    try:
        return ProfileFile.model_validate(data).to_profile()
    except ValidationError as exc:
        raise UserError(f"{path}: {describe_validation_error(exc, model=ProfileFile)}") from None


def is_profile_path(name_or_path: str) -> bool:
    """A file path rather than a built-in name: a YAML suffix or a path separator."""
    text = name_or_path.strip()
    return text.lower().endswith((".yaml", ".yml")) or "/" in text or "\\" in text


def load_gpu(name_or_path: str) -> GpuProfile:
    """A built-in accelerator name (case-insensitive) or a profile file."""
    if name_or_path.strip().lower() in GPUS or not is_profile_path(name_or_path):
        return get_gpu(name_or_path)
    return read_profile(name_or_path)


def platform_of(name_or_path: str) -> str | None:
    """The platform ("cuda", "cpu") of an accelerator name or profile file: whose vLLM rules
    its engine meets (its block sizes, `tuner.spec.vllm_rules`); None when none is named or
    it does not load."""
    if not name_or_path:
        return None
    try:
        return load_gpu(name_or_path).platform
    except UserError:
        return None

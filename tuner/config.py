"""The study file: a YAML document validated by pydantic before anything starts."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tuner import slo
from tuner.errors import UserError
from tuner.workload.spec import WorkloadSpec

Scalar = str | int | float | bool


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ParameterSpec(_Strict):
    """One tuned parameter: a vLLM flag (`--name`, bools as `--name`/`--no-name`) or an env var."""

    type: Literal["int", "float", "categorical", "bool"]
    low: float | None = None
    high: float | None = None
    step: float | None = None
    log: bool = False
    choices: list[Scalar] | None = None
    flag: str | None = None
    env: str | None = None
    default: Scalar | None = Field(None, description="vLLM's own default: the baseline trial")

    @model_validator(mode="after")
    def _check(self) -> ParameterSpec:
        if self.type in ("int", "float"):
            if self.low is None or self.high is None:
                raise ValueError(f"{self.type} parameter needs low and high")
            if self.low > self.high:
                raise ValueError(f"low ({self.low:g}) > high ({self.high:g})")
            if self.log and self.low <= 0:
                raise ValueError("log scale needs low > 0")
            if self.log and self.step is not None and self.type == "float":
                raise ValueError("log scale and step cannot be combined")
        elif self.type == "categorical" and not self.choices:
            raise ValueError("categorical parameter needs choices")
        if self.flag and self.env:
            raise ValueError("a parameter maps to a flag or an env var, not both")
        if self.flag and not self.flag.startswith("--"):
            raise ValueError(f"flag {self.flag!r} must start with --")
        if self.default is not None and not self.contains(self.default):
            raise ValueError(f"default {self.default!r} is outside the range")
        return self

    def contains(self, value: Scalar) -> bool:
        if self.type == "bool":
            return isinstance(value, bool)
        if self.type == "categorical":
            return value in (self.choices or [])
        assert self.low is not None and self.high is not None
        return isinstance(value, int | float) and self.low <= value <= self.high


class SearchSpace(_Strict):
    parameters: dict[str, ParameterSpec]

    @field_validator("parameters")
    @classmethod
    def _names(cls, v: dict[str, ParameterSpec]) -> dict[str, ParameterSpec]:
        if not v:
            raise ValueError("the search space has no parameters")
        for name in v:
            if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_-]*", name):
                raise ValueError(f"bad parameter name {name!r}")
        return v


class EngineSpec(_Strict):
    """How to start the engine. `{model}` and `{python}` are substituted in `command`."""

    command: list[str] = ["vllm", "serve", "{model}"]
    model: str
    served_model_name: str | None = None
    flags: dict[str, Scalar | None] = {}
    env: dict[str, str] = {}
    host: str = "127.0.0.1"
    startup_timeout_s: float = Field(1200.0, gt=0)
    cpu_affinity: list[int] | None = None
    api_key_env: str | None = None
    export_drop_flags: list[str] = []

    @field_validator("command")
    @classmethod
    def _command(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("engine command is empty")
        return v

    @field_validator("flags")
    @classmethod
    def _flags(cls, v: dict[str, Scalar | None]) -> dict[str, Scalar | None]:
        managed = {"host", "port", "api-key"}
        for name in v:
            if name.startswith("-"):
                raise ValueError(f"write flag {name!r} without leading dashes")
            if name in managed:
                raise ValueError(f"flag {name!r} is set by the tuner")
        return v


def _checked(check: Any, value: str) -> None:
    """Run a shared check inside a validator, so the error names the file and field."""
    try:
        check(value)
    except UserError as exc:
        raise ValueError(str(exc)) from None


class ObjectiveSpec(_Strict):
    """Scalar mode: weighted log-ratios against the baseline. Multi: a Pareto search."""

    mode: Literal["scalar", "multi"] = "scalar"
    weights: dict[str, float] = {"p99_ttft_ms": 1.0, "mean_tpot_ms": 1.0, "output_throughput": 1.0}
    objectives: list[str] = ["p99_ttft_ms", "mean_tpot_ms", "output_throughput"]
    slo: list[str] = []
    max_failed_fraction: float = Field(0.05, ge=0.0, le=1.0)

    @field_validator("weights")
    @classmethod
    def _weights(cls, v: dict[str, float]) -> dict[str, float]:
        for name, w in v.items():
            _checked(slo.metric_direction, name)
            if w < 0:
                raise ValueError(f"weight of {name} is negative")
        if not any(w > 0 for w in v.values()):
            raise ValueError("at least one weight must be > 0")
        return v

    @field_validator("objectives")
    @classmethod
    def _objectives(cls, v: list[str]) -> list[str]:
        for name in v:
            _checked(slo.metric_direction, name)
        return v

    @field_validator("slo")
    @classmethod
    def _slo(cls, v: list[str]) -> list[str]:
        for text in v:
            _checked(slo.parse_slo, text)
        return v


class BudgetSpec(_Strict):
    n_trials: int = Field(30, ge=1)
    timeout: str | None = None  # e.g. "8h", "90m", "3600s"

    @field_validator("timeout")
    @classmethod
    def _timeout(cls, v: str | None) -> str | None:
        if v is not None:
            parse_duration_s(v)
        return v

    @property
    def timeout_s(self) -> float | None:
        return None if self.timeout is None else parse_duration_s(self.timeout)


class SamplerSpec(_Strict):
    name: Literal["tpe", "random", "gp", "nsga2"] = "tpe"
    seed: int | None = 0


class HardwareSpec(_Strict):
    """What the engine runs on; used by the simulator and the pre-launch memory check."""

    gpu: str | None = None
    count: int = Field(1, ge=1)
    gpu_memory_gib: float | None = Field(None, gt=0)


class TrialSpec(_Strict):
    stall_timeout_s: float = Field(60.0, gt=0)
    repeat_measured: bool = False
    retry_interrupted: bool = False
    confirm_repeats: int = Field(3, ge=1)


class StudySpec(_Strict):
    name: str
    description: str = ""
    engine: EngineSpec
    search_space: SearchSpace
    workload: WorkloadSpec
    objective: ObjectiveSpec = ObjectiveSpec()
    budget: BudgetSpec = BudgetSpec()
    sampler: SamplerSpec = SamplerSpec()
    hardware: HardwareSpec = HardwareSpec()
    trial: TrialSpec = TrialSpec()
    storage: str | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", v):
            raise ValueError(f"study name {v!r} may hold only letters, digits, '.', '_' and '-'")
        return v


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")


def parse_duration_s(text: str) -> float:
    """`8h`, `90m`, `3600s` or `3600` to seconds."""
    m = _DURATION.match(str(text))
    if not m:
        raise ValueError(f"bad duration {text!r}: use e.g. 8h, 90m, 3600s")
    value, unit = m.groups()
    return float(value) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[unit]


def _read_yaml(path: Path, what: str) -> dict[str, Any]:
    if not path.is_file():
        raise UserError(f"{path}: {what} not found")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise UserError(f"{path}:{where} invalid YAML: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: {what} must be a YAML mapping")
    return data


def _describe(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        msg = "unknown key"
    return f"{loc}: {msg}" if loc else msg


def load_study_spec(path: str | Path) -> StudySpec:
    """Read and validate a study file; each problem is one UserError naming file and field."""
    path = Path(path)
    data = _read_yaml(path, "study file")
    space = data.get("search_space")
    space_path = path
    if isinstance(space, str):
        space_path = (path.parent / space).resolve()
        data["search_space"] = _read_yaml(space_path, "search-space file")
    try:
        return StudySpec.model_validate(data)
    except ValidationError as exc:
        where = _describe(exc)
        if isinstance(space, str) and where.startswith("search_space."):
            raise UserError(f"{space_path}: {where.removeprefix('search_space.')}") from None
        raise UserError(f"{path}: {where}") from None

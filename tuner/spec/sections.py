"""The study file's sections (engine, search space, objective, budget, hardware, pruning,
...): each a strict pydantic model; `config.StudySpec` puts them together."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tuner.errors import UserError
from tuner.spec import flag_values, inputs, slo
from tuner.spec.metric_keys import HEADLINE_METRICS
from tuner.spec.parsing import parse_duration_s
from tuner.spec.values import Scalar
from tuner.spec.workload import SEED_LIMIT, WorkloadSpec

MAX_NAME_LEN = 128  # study names go into log file names: `<name>-simulated-trial-0001.log`
PLAN_STUDY_SUFFIX = "-simulated"  # `tuner plan`'s study of a study file: `<name>-simulated`
MAX_TRIALS = 100_000
MAX_WEIGHT = 1e6  # only ratios of weights matter; 1e308 printed 300-digit scores
MAX_GPUS = 256  # GPU indices 0..255: no box holds more (CUDA numbers them from 0)


class _Strict(inputs.NoBoolNumbers, BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


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
            if self.type == "float" and self.step is not None and not self.step > 0:
                raise ValueError(f"step must be > 0, not {self.step:g}")
            if self.type == "int":
                for what, value in (("low", self.low), ("high", self.high), ("step", self.step)):
                    if value is not None and not float(value).is_integer():
                        raise ValueError(f"int parameter: {what} must be a whole number")
                if self.step is not None and self.step < 1:
                    raise ValueError(
                        f"int parameter: step must be a positive integer, not {self.step:g}"
                    )
        elif self.type == "categorical" and not self.choices:
            raise ValueError("categorical parameter needs choices")
        if self.flag and self.env:
            raise ValueError("a parameter maps to a flag or an env var, not both")
        if self.flag and not self.flag.startswith("--"):
            raise ValueError(f"flag {self.flag!r} must start with --")
        if self.env is not None:
            inputs.check_env_name(self.env)
        if self.type == "int" and isinstance(self.default, float) and not self.default.is_integer():
            raise ValueError(f"default {self.default!r} of an int parameter is not whole")
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
    # data-parallel-size derived: the trial's GPUs / (TP x PP) (tuner.spec.space)
    fill_data_parallel: bool = False

    @field_validator("parameters")
    @classmethod
    def _names(cls, v: dict[str, ParameterSpec]) -> dict[str, ParameterSpec]:
        if not v:
            raise ValueError("the search space has no parameters")
        for name in v:
            if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_-]*", name):
                raise ValueError(f"bad parameter name {name!r}")
        # one of vLLM's numeric flags draws numbers of its kind, written as vLLM reads them
        return {name: flag_values.numeric_parameter(name, p) for name, p in v.items()}


class EngineSpec(_Strict):
    """How to start the engine. `{model}` and `{python}` are substituted in `command`."""

    command: list[str] = ["vllm", "serve", "{model}"]
    model: inputs.ModelName
    # what production's `vllm serve` loads (a Hugging Face id, or a path on the serving box)
    # when it is not `model` (which the simulator reads, e.g. a local copy of config.json):
    # the exported command's model; not part of what a trial measures
    production_model: inputs.ModelName | None = None
    served_model_name: str | None = None
    flags: dict[str, Scalar | None] = {}
    env: dict[str, str] = {}
    host: str = "127.0.0.1"
    startup_timeout_s: float = Field(1200.0, gt=0, le=inputs.MAX_TIMEOUT_S)
    cpu_affinity: list[Annotated[int, Field(ge=0, lt=65536)]] | None = None
    api_key_env: str | None = None
    export_drop_flags: list[str] = []

    @property
    def deployed_model(self) -> str:
        """The model of the exported `vllm serve MODEL`: `production_model`, else `model`."""
        return self.production_model or self.model

    @field_validator("command")
    @classmethod
    def _command(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("engine command is empty")
        for part in v:
            inputs.check_command_part(part)
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        for name in v:
            inputs.check_env_name(name)
        return v

    @field_validator("api_key_env")
    @classmethod
    def _api_key_env(cls, v: str | None) -> str | None:
        if v is not None and not inputs.POSIX_NAME.fullmatch(v):
            raise ValueError(f"{v!r} is not a POSIX env name ([A-Za-z_][A-Za-z0-9_]*)")
        return v

    @field_validator("host")
    @classmethod
    def _host(cls, v: str) -> str:
        inputs.check_host(v)
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
        return {name: flag_values.flag_value(name, value) for name, value in v.items()}


def _checked(check: Callable[[str], object], value: str) -> None:
    """Run a shared check inside a validator, so the error names the file and field."""
    try:
        check(value)
    except UserError as exc:
        raise ValueError(str(exc)) from None


def _check_slos(v: list[str]) -> list[str]:
    for text in v:
        _checked(slo.check_sense, text)  # parses it, and refuses an inverted limit
        for limit in slo.parse_slo(text):
            if not math.isfinite(limit.value):
                raise ValueError(f"SLO {text!r}: the limit must be a finite number")
    return v


class CapacitySpec(_Strict):
    """Capacity mode's rate search (`tuner.measure.capacity`, docs/objective.md "Capacity mode")."""

    start_rps: float | None = Field(None, gt=0, le=1e6)  # None: workload.request_rate, else 1
    resolution: float = Field(0.05, gt=0, le=1.0)  # stop when hi / lo ≤ 1 + resolution
    max_runs: int = Field(8, ge=1, le=100)  # rates per trial (per scenario)
    # extra runs per trial (per scenario) for the capacity's 95 % interval: a fresh seed at a
    # rate, or a new rate past those measured (`tuner.measure.rate_verdicts.next_rate`)
    max_repeats: int = Field(4, ge=0, le=100)
    # runs per config (per scenario), the bracket's, the bisection's and the repeats together;
    # once spent the search stops with the interval it has (None: max_runs + max_repeats)
    max_steps: int | None = Field(None, ge=1, le=200)
    min_rps: float = Field(0.05, gt=0, le=1e6)
    max_rps: float = Field(1000.0, gt=0, le=1e6)

    @model_validator(mode="after")
    def _order(self) -> CapacitySpec:
        if self.min_rps > self.max_rps:
            raise ValueError(f"min_rps ({self.min_rps:g}) > max_rps ({self.max_rps:g})")
        return self


class ObjectiveSpec(_Strict):
    """Scalar mode: weighted log-ratios against the baseline. Multi: a Pareto search.
    Capacity: the highest request rate that meets every SLO, maximised."""

    mode: Literal["scalar", "multi", "capacity"] = "scalar"
    weights: dict[str, float] = dict.fromkeys(HEADLINE_METRICS, 1.0)
    objectives: list[str] = list(HEADLINE_METRICS)
    slo: list[str] = []
    max_failed_fraction: float = Field(0.05, ge=0.0, le=1.0)
    capacity: CapacitySpec | None = None  # capacity mode's search; None: the defaults
    aggregate: Literal["weighted", "worst"] = "weighted"  # over scenarios

    @property
    def search(self) -> CapacitySpec:
        return self.capacity or CapacitySpec()

    @field_validator("weights")
    @classmethod
    def _weights(cls, v: dict[str, float]) -> dict[str, float]:
        for name, w in v.items():
            _checked(slo.metric_direction, name)
            if not 0 <= w <= MAX_WEIGHT:
                raise ValueError(f"weight of {name} is {w:g}: give 0 to {MAX_WEIGHT:g}")
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
        return _check_slos(v)


class ScenarioSpec(WorkloadSpec):
    """One named workload of a mix: its own dataset and shape, a weight, its own SLOs."""

    name: str
    weight: float = Field(1.0, gt=0, le=1e6)
    slo: list[str] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _dataset_given(cls, data: object) -> object:
        if isinstance(data, dict) and "dataset_name" not in data:
            raise ValueError(f"scenario {data.get('name', '?')!r} names no dataset_name")
        return data

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]{0,39}", v):
            raise ValueError(f"scenario name {v!r}: a letter, then letters, digits, _ or -")
        return v

    @field_validator("slo")
    @classmethod
    def _slo(cls, v: list[str]) -> list[str]:
        return _check_slos(v)

    def workload(self) -> WorkloadSpec:
        return WorkloadSpec.model_validate(self.model_dump(exclude={"name", "weight", "slo"}))


class BudgetSpec(_Strict):
    n_trials: int = Field(30, ge=1, le=MAX_TRIALS)
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
    seed: int | None = Field(0, ge=0, lt=SEED_LIMIT)


def parse_gpus(text: str) -> list[int]:
    """GPU indices as `--gpus` and `hardware.gpus` give them: "0-7", "0,1,4-5"."""
    out: list[int] = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d{1,4})\s*(?:-\s*(\d{1,4})\s*)?", part)
        if m is None:
            raise ValueError(f"GPUs {text!r}: give indices and ranges, e.g. 0-7 or 0,1,4-5")
        low, high = int(m[1]), int(m[2] or m[1])
        if high < low:
            raise ValueError(f"GPUs {text!r}: range {part.strip()} runs backwards")
        if high >= MAX_GPUS:
            raise ValueError(
                f"GPUs {text!r}: index {high} is past {MAX_GPUS - 1}: no box holds over "
                f"{MAX_GPUS} GPUs (give the indices CUDA numbers them by, from 0)"
            )
        out.extend(range(low, high + 1))
    if len(set(out)) != len(out):
        raise ValueError(f"GPUs {text!r}: a GPU is listed twice")
    return out


class HardwareSpec(_Strict):
    """What the engine runs on; used by the simulator and the pre-launch memory check."""

    gpu: str | None = None  # a built-in accelerator name (`tuner.sim.profiles.GPUS`)
    # a profile file (docs/simulator.md, "Profile files"): replaces `gpu`'s built-in figures
    # for the simulator and the memory precheck; relative to the study file
    profile: str | None = Field(None, min_length=1)
    count: int = Field(1, ge=1, le=4096)
    gpu_memory_gib: float | None = Field(None, gt=0)
    # `tuner plan`: an engine's launch-to-ready seconds (default: docs/early-stopping.md)
    startup_s: float | None = Field(None, ge=0, le=inputs.MAX_TIMEOUT_S)
    # GPU slots on one box (docs/scale-out.md): trials run in parallel, `gpus_per_trial` each
    gpus: str | None = None  # "0-7", "0,1,4-5"; None: one trial at a time on what CUDA sees
    gpus_per_trial: int | None = Field(None, ge=1, le=4096)

    @field_validator("gpus")
    @classmethod
    def _gpus(cls, v: str | None) -> str | None:
        if v is not None:
            parse_gpus(v)
        return v

    @model_validator(mode="after")
    def _slots(self) -> HardwareSpec:
        n = len(self.gpu_list)
        if self.gpus_per_trial is not None and n and self.gpus_per_trial > n:
            raise ValueError(
                f"gpus_per_trial {self.gpus_per_trial} is more than the {n} GPU(s) in gpus"
            )
        if self.gpus_per_trial is not None and not n:
            raise ValueError("gpus_per_trial needs gpus (the GPUs to split into slots)")
        return self

    @property
    def gpu_list(self) -> list[int]:
        return parse_gpus(self.gpus) if self.gpus else []

    def gpu_slots(self) -> list[list[int]]:
        """Disjoint GPU sets, one per parallel trial (leftover GPUs stay idle); [] when no
        slots were asked for."""
        gpus = self.gpu_list
        if not gpus:
            return []
        k = self.gpus_per_trial or len(gpus)
        return [gpus[i : i + k] for i in range(0, len(gpus) - k + 1, k)]

    @property
    def accelerator(self) -> str | None:
        """What the simulator and the precheck load: the profile file, else the GPU's name."""
        return self.profile or self.gpu


class TrialSpec(_Strict):
    stall_timeout_s: float = Field(60.0, gt=0, le=inputs.MAX_TIMEOUT_S)
    repeat_measured: bool = False
    retry_interrupted: bool = False
    confirm_repeats: int = Field(3, ge=1, le=100)
    busy_wait_s: float = Field(30.0, ge=0, le=inputs.MAX_TIMEOUT_S)  # docs/reliability.md


class PruningSpec(_Strict):
    """Early stopping (docs/early-stopping.md): stop a trial whose end is already decided."""

    enabled: bool = True
    min_completed: int = Field(20, ge=1, le=MAX_TRIALS)  # before "cannot beat the best" applies
    min_fraction: float = Field(0.2, ge=0.0, le=1.0)  # of the workload, likewise
    check_every_s: float = Field(2.0, gt=0, le=3600)  # checkpoint period (virtual s in plan)
    check_every_requests: int | None = Field(None, ge=1, le=MAX_TRIALS)  # and every N completed
    queue_growth: int = Field(8, ge=1, le=MAX_TRIALS)  # engine queue rise that shows overload
    margin: float = Field(0.0, ge=0.0, le=10.0)  # score slack before "cannot beat" stops
    # a stop must save this fraction of the run's expected workload time (never later)
    min_saving: float = Field(0.2, ge=0.0, lt=1.0)
    # never launch a config the calibrated simulator rules out (docs/early-stopping.md)
    prediction_skip: bool = True


class SearchSpec(_Strict):
    """How each real trial is chosen (docs/multi-fidelity.md). `single`: the sampler alone.
    `multi`: before each real trial, screen `candidates` configs on the simulator, calibrated
    with the real trials so far, and run the best-ranked one (Optuna stores and counts it)."""

    fidelity: Literal["single", "multi"] = "single"
    candidates: int = Field(256, ge=1, le=100_000)  # configs screened per real trial
    # requests the screen simulates per candidate (the workload's first N; None: all of them)
    screen_prompts: int | None = Field(None, ge=1, le=1_000_000)
    # how far the rank rule trusts the simulator less away from the real trials (0: greedy)
    exploration: float = Field(1.0, ge=0.0, le=100.0)

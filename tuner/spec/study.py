"""The study file: a YAML document validated by pydantic before anything starts.

The sections live in `tuner.spec.sections`, the YAML/error plumbing in `tuner.spec.parsing`;
this module puts them together (`StudySpec`). Import each name from its own module."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import Field, ValidationError, field_validator, model_validator

from tuner.errors import UserError
from tuner.spec import coherence, contents, inputs, slo
from tuner.spec.parsing import describe_validation_error, read_yaml_mapping
from tuner.spec.sections import (
    MAX_NAME_LEN,
    PLAN_STUDY_SUFFIX,
    BudgetSpec,
    EngineSpec,
    HardwareSpec,
    ObjectiveSpec,
    PruningSpec,
    SamplerSpec,
    ScenarioSpec,
    SearchSpace,
    SearchSpec,
    TrialSpec,
    _Strict,
)
from tuner.spec.workload import WorkloadSpec, check_measured


class StudySpec(_Strict):
    name: str
    description: str = ""
    engine: EngineSpec
    search_space: SearchSpace
    workload: WorkloadSpec  # with scenarios: the first one's (tokenizer, export, checks)
    # `workload:` written as a list of named scenarios
    scenarios: list[ScenarioSpec] = Field(default_factory=list)
    objective: ObjectiveSpec = ObjectiveSpec()
    budget: BudgetSpec = BudgetSpec()
    sampler: SamplerSpec = SamplerSpec()
    hardware: HardwareSpec = HardwareSpec()
    trial: TrialSpec = TrialSpec()
    pruning: PruningSpec = PruningSpec()
    search: SearchSpec = SearchSpec()
    storage: str | None = None
    # filled in when the file is read (`tuner.spec.contents`; one written in the file, as in a
    # dumped spec, is replaced): the digests of the files it names, so that an edited profile
    # or dataset is a changed spec
    file_contents: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _no_nul(cls, data: object) -> object:
        where = inputs.find_nul(data)
        if where is not None:
            raise ValueError(f"{where}: contains a NUL character, which no argv or env can carry")
        if isinstance(data, dict) and isinstance(data.get("workload"), list):
            if "scenarios" in data:
                raise ValueError("workload: a list of scenarios, or scenarios:, not both")
            mix = data["workload"]
            if not mix or not all(isinstance(s, dict) for s in mix):
                raise ValueError("workload: a list of scenarios, each a mapping with a name")
            first = {k: v for k, v in mix[0].items() if k not in ("name", "weight", "slo")}
            data = {**data, "workload": first, "scenarios": mix}
        return data

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if len(v) > MAX_NAME_LEN:
            raise ValueError(f"study name is {len(v)} characters long: at most {MAX_NAME_LEN}")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", v):
            raise ValueError(f"study name {v!r} may hold only letters, digits, '.', '_' and '-'")
        if v.endswith(PLAN_STUDY_SUFFIX):  # `tuner plan` of study `xx` is stored as `xx-simulated`
            raise ValueError(
                f"study name {v!r} ends in {PLAN_STUDY_SUFFIX!r}, the name `tuner plan` gives "
                f"the planned study of {v.removesuffix(PLAN_STUDY_SUFFIX)!r}: choose another"
            )
        return v

    @model_validator(mode="after")
    def _measured(self) -> StudySpec:
        """Every metric the objective reads must be one the workload produces."""
        obj = self.objective
        wanted = [("objective.weights", n) for n, w in obj.weights.items() if w > 0]
        if obj.mode == "multi":
            wanted += [("objective.objectives", n) for n in obj.objectives]
        for text in obj.slo:
            wanted += [("objective.slo", limit.metric) for limit in slo.parse_slo(text)]
        for w in list(self.workloads.values()) or [self.workload]:
            for where, name in wanted:
                if problem := check_measured(w, name):
                    raise ValueError(f"{where}: {problem}")
        for s in self.scenarios:
            for limit in (lm for text in s.slo for lm in slo.parse_slo(text)):
                if problem := check_measured(s, limit.metric):
                    raise ValueError(f"workload.{s.name}.slo: {problem}")
        return self

    @model_validator(mode="after")
    def _mix(self) -> StudySpec:
        names = [s.name for s in self.scenarios]
        if len(set(names)) != len(names):
            raise ValueError(f"workload: scenario names repeat ({', '.join(names)})")
        if self.scenarios and self.objective.mode == "multi":
            raise ValueError("objective.mode multi takes one workload, not scenarios")
        every_scenario_has_one = bool(self.scenarios) and all(s.slo for s in self.scenarios)
        if self.objective.mode == "capacity" and not (self.objective.slo or every_scenario_has_one):
            raise ValueError(
                "objective.slo: capacity mode needs an SLO (the limits that the highest "
                "rate must meet), e.g. p99_ttft_ms<=2000"
            )
        return self

    @model_validator(mode="after")
    def _coherent(self) -> StudySpec:
        coherence.check_study(self)
        return self

    @property
    def simulated_accelerator(self) -> str:
        """The accelerator the simulator starts from: `hardware.profile` or `hardware.gpu`, else
        the simulated engine's own `--gpu` flag (`tuner sim serve --gpu`); "" when none."""
        return self.hardware.accelerator or str(self.engine.flags.get("gpu") or "")

    @property
    def workloads(self) -> dict[str, WorkloadSpec]:
        """The named scenarios' workloads in order ({} for a single workload)."""
        return {s.name: s.workload() for s in self.scenarios}

    def slo_limits(self, scenario: str | None = None) -> list[slo.SloLimit]:
        """The study's SLOs, plus one scenario's own."""
        texts = list(self.objective.slo)
        texts += next((s.slo for s in self.scenarios if s.name == scenario), [])
        return [limit for text in texts for limit in slo.parse_slo(text)]


def stored_spec(data: object, study_name: str) -> StudySpec:
    """A spec read back from a study's storage; one that this tuner's checks now refuse (it
    was stored by an older tuner) is one line, not a traceback."""
    try:
        return StudySpec.model_validate(data)
    except ValidationError as exc:
        raise UserError(
            f"study {study_name!r} was stored with a study file this tuner refuses "
            f"({describe_validation_error(exc)}): run it under a new study name"
        ) from None


def load_study_spec(path: str | Path) -> StudySpec:
    """Read and validate a study file; each problem is one UserError naming file and field."""
    path = Path(path)
    data = read_yaml_mapping(path, "study file")
    space = data.get("search_space")
    space_path = path
    if isinstance(space, str):
        space_path = (path.parent / space).resolve()
        data["search_space"] = read_yaml_mapping(space_path, "search-space file")
    _resolve_paths(data, path.parent)
    hardware = data.get("hardware")
    if isinstance(hardware, dict) and isinstance(hardware.get("profile"), str):
        hardware["profile"] = str((path.parent / hardware["profile"]).resolve())
    try:
        spec = StudySpec.model_validate(data)
    except ValidationError as exc:
        where = describe_validation_error(exc, model=StudySpec)
        if isinstance(space, str) and where.startswith("search_space."):
            raise UserError(f"{space_path}: {where.removeprefix('search_space.')}") from None
        raise UserError(f"{path}: {where}") from None
    return spec.model_copy(update={"file_contents": contents.file_contents(spec)})


def _resolve_paths(data: dict[str, object], folder: Path) -> None:
    """The model directory, tokenizers and dataset files a study file names by a relative
    path, read from the file's own folder (`tuner init` writes them so, and the file can be
    shared). A path that exists from the file's folder is taken from there; any other stays
    as written: one that exists from the working directory (a file written before,
    `.cache/tiny-qwen2` run from the checkout), a hub id or built-in model, or a missing
    file, which the checks then name as the user wrote it."""

    def resolved(value: object) -> object:
        if not isinstance(value, str) or not value or Path(value).expanduser().is_absolute():
            return value
        there = folder / value
        return str(there.resolve()) if there.exists() else value

    engine = data.get("engine")
    if isinstance(engine, dict):
        if "model" in engine:
            engine["model"] = resolved(engine["model"])
        flags = engine.get("flags")
        if isinstance(flags, dict) and "tokenizer" in flags:
            flags["tokenizer"] = resolved(flags["tokenizer"])
    workloads = data.get("workloads")
    named = [data.get("workload"), *(workloads.values() if isinstance(workloads, dict) else [])]
    for w in (x for x in named if isinstance(x, dict)):
        for key in ("tokenizer", "dataset_path"):
            if key in w:
                w[key] = resolved(w[key])

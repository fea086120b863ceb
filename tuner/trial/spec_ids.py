"""What a spec measures and how it judges, as ids and as differences (the measurement id,
`spec_id`, and the judging id, `judging_id`; `tuner.trial.specs` keeps them with the study).

Pure: spec dumps (`StudySpec.model_dump()`, or one read back from storage) in, ids and
`path: old → new` lines out.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from tuner.measure.modes import MODES, Objective
from tuner.spec.sections import HardwareSpec
from tuner.spec.space import hardware_gpus
from tuner.spec.study import stored_spec

# Parts of a spec that do not change what a trial measures: trials stay comparable.
COMPARABLE = (
    "name",
    "description",
    "storage",
    "budget",
    "sampler",
    "trial.stall_timeout_s",
    "trial.retry_interrupted",
    "trial.repeat_measured",
    "trial.confirm_repeats",
    "trial.busy_wait_s",  # how long to wait for a busy GPU: the box's state, not the config's
    "engine.startup_timeout_s",
    "engine.api_key_env",
    "engine.export_drop_flags",
    "engine.production_model",
    "pruning",  # when a hopeless trial stops, not what a finished trial measures
    "hardware.startup_s",
    "hardware.gpus",  # how many trials run at once, not what one trial measures ...
    "hardware.gpus_per_trial",  # ... unless they set the shape: `FILLED_GPUS`
)
# `hardware.<FILLED_GPUS>`: under `fill_data_parallel`, the GPUs of a trial (`gpus_per_trial`,
# the listed `gpus`, else `count`) set its data-parallel-size: part of what it measures
FILLED_GPUS = "gpus_of_a_trial"
# How trials are judged, not what they measure: a change re-scores the stored trials.
JUDGING = ("objective.weights", "objective.aggregate", "objective.slo")
SCENARIO_JUDGING = ("weight", "slo")
CONTENTS = "file_contents."  # `file_contents.<where>`: a named file's digest (spec/contents.py)
LONGDOC_FIELDS = (
    "longdoc_lengths",
    "longdoc_weights",
    "longdoc_output_len",
    "longdoc_questions",
    "longdoc_system_len",
    "longdoc_order",
)


def canonical(dump: Mapping[str, object]) -> dict[str, Any]:
    """A spec dump as it reads back from storage (JSON types), with every default filled in."""
    spec = stored_spec(dict(dump), str(dump.get("name")))
    as_stored: dict[str, Any] = json.loads(json.dumps(spec.model_dump()))
    return as_stored


def measured_part(data: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(data))
    if out.get("search_space", {}).get("fill_data_parallel"):
        gpus = hardware_gpus(HardwareSpec.model_validate(data["hardware"]))
        out["hardware"][FILLED_GPUS] = gpus
    for path in COMPARABLE:
        *parents, leaf = path.split(".")
        node = out
        for key in parents:
            node = node.get(key, {})
        node.pop(leaf, None)
    # The long-document fields measure nothing under another dataset.
    workload = out.get("workload", {})
    if workload.get("dataset_name") != "longdoc":
        for key in LONGDOC_FIELDS:
            workload.pop(key, None)
    judging = judging_part(out)
    objective = out.get("objective", {})
    for key in ("weights", "aggregate", "slo"):
        if f"objective.{key}" in judging:
            objective.pop(key, None)
    for scenario in out.get("scenarios") or []:
        for key in SCENARIO_JUDGING:
            if f"scenarios.{scenario.get('name')}.{key}" in judging:
                scenario.pop(key, None)
    return out


def judging_part(data: Mapping[str, Any]) -> dict[str, Any]:
    """How trials are judged, flat (`path: value`) from a canonical dump. Capacity mode: the
    SLOs choose the rates its search runs, so they stay part of the measurement."""
    objective = data.get("objective", {})
    capacity = MODES.get(objective.get("mode"), Objective).has_capacity  # by its mode's object
    out = {p: objective.get(p.split(".")[1]) for p in JUDGING if not (capacity and "slo" in p)}
    for scenario in data.get("scenarios") or []:
        for key in SCENARIO_JUDGING:
            if not (capacity and key == "slo"):
                out[f"scenarios.{scenario.get('name')}.{key}"] = scenario.get(key)
    return out


def judging_id(spec: BaseModel | Mapping[str, object]) -> str:
    """12 hex digits naming how a spec judges trials (its objective and SLOs)."""
    dump = spec.model_dump() if isinstance(spec, BaseModel) else spec
    text = json.dumps(judging_part(canonical(dump)), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def judging_changes(old: Mapping[str, object], new: Mapping[str, object]) -> list[str]:
    """What changed in how trials are judged, as `path: old → new`."""
    a, b = judging_part(canonical(old)), judging_part(canonical(new))
    return [
        f"{path}: {_show(a.get(path))} → {_show(b.get(path))}"
        for path in sorted(set(a) | set(b))
        if a.get(path) != b.get(path)
    ]


def spec_id(dump: Mapping[str, object]) -> str:
    """12 hex digits naming what the spec measures (the measurement id): equal ids,
    comparable trials."""
    text = json.dumps(measured_part(canonical(dump)), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _flatten(data: object, prefix: str = "") -> dict[str, object]:
    if isinstance(data, dict):
        out: dict[str, object] = {}
        for k, v in data.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out or {prefix: {}}
    return {prefix: data}


def _show(value: object) -> str:
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    return "unset" if value is None else json.dumps(value)


def changes(old: Mapping[str, object], new: Mapping[str, object]) -> list[str]:
    """What changed in the measured part, as `path: old → new`, in a stable order."""
    a = _flatten(measured_part(canonical(old)))
    b = _flatten(measured_part(canonical(new)))
    return [
        _change(path, a.get(path), b.get(path))
        for path in sorted(set(a) | set(b))
        if a.get(path) != b.get(path)
    ]


def _change(path: str, old: object, new: object) -> str:
    if path == f"hardware.{FILLED_GPUS}":
        return (
            f"the GPUs of a trial, which fill_data_parallel fills with replicas "
            f"(hardware.gpus_per_trial or --gpus-per-trial, else the listed GPUs): "
            f"{_show(old)} → {_show(new)}"
        )
    if path.startswith(CONTENTS) and old is not None and new is not None:
        return f"{path.removeprefix(CONTENTS)}: the file's contents changed"
    return f"{path}: {_show(old)} → {_show(new)}"

"""The study file a trial was measured under: stored with the study, compared on every resume.

A study keeps every spec it has run under, keyed by a `spec_id`: a hash of the parts of the
spec that change what a trial measures (engine, fixed flags, hardware, workload, objective,
search space), and of the contents of the files it names (`file_contents`: the profile,
datasets, tokenizer files, chat template; `tuner.spec.contents`). Every trial records the id
it ran under. So:
- a resumed run whose file changes only comparable parts (the budget, the sampler, timeouts,
  the description) goes on under the same id;
- any other change stops the run with one line, unless the user passes `--accept-changes`:
  then the new spec gets its own id, its own baseline, and nothing is reused or compared
  across the two;
- results (`best`, `export`, `report`) read the current spec's trials, and build every
  command from the stored spec of the trial they print, never from today's file.

Pure apart from reading and writing study user attrs (duck-typed: `user_attrs`,
`set_user_attr`).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any

from tuner.errors import UserError
from tuner.spec.study import StudySpec, stored_spec
from tuner.trial import keys as tr
from tuner.trial.point import TrialPoint
from tuner.trial.study import StudyRecord

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
    "engine.startup_timeout_s",
    "engine.api_key_env",
    "engine.export_drop_flags",
    "engine.production_model",
    "pruning",  # when a hopeless trial stops, not what a finished trial measures
    "hardware.startup_s",
    "hardware.gpus",  # how many trials run at once, not what one trial measures
    "hardware.gpus_per_trial",
)
SHOWN_CHANGES = 4
# Fields added after studies were stored: left out of the id while at their default, so a
# study stored before they existed keeps its id (its trials stay comparable).
ADDED_DEFAULTS = {
    "scenarios": [],
    "objective.capacity": None,
    "objective.aggregate": "weighted",
    "file_contents": {},
}
CONTENTS = "file_contents."  # `file_contents.<where>`: a named file's digest (spec/contents.py)
LONGDOC_FIELDS = (
    "longdoc_lengths",
    "longdoc_weights",
    "longdoc_output_len",
    "longdoc_questions",
    "longdoc_system_len",
    "longdoc_order",
)
# Workload fields added later, at the value that measures what studies stored before them did:
# left out of the id there (in the study's workload and in every scenario's).
ADDED_WORKLOAD_DEFAULTS = {
    "longdoc_questions": [1],
    "longdoc_system_len": 0,
    "longdoc_order": "burst",
}


def canonical(dump: Mapping[str, Any]) -> dict[str, Any]:
    """A spec dump as it reads back from storage (JSON types), with every default filled in."""
    spec = stored_spec(dict(dump), str(dump.get("name")))
    return json.loads(json.dumps(spec.model_dump()))


def _measured_part(data: dict[str, Any]) -> dict[str, Any]:
    out = json.loads(json.dumps(data))
    for path in COMPARABLE:
        *parents, leaf = path.split(".")
        node = out
        for key in parents:
            node = node.get(key, {})
        node.pop(leaf, None)
    for path, default in ADDED_DEFAULTS.items():
        *parents, leaf = path.split(".")
        node = out
        for key in parents:
            node = node.get(key, {})
        if leaf in node and node[leaf] == default:
            del node[leaf]
    # The long-document fields measure nothing under another dataset; leaving them out also
    # keeps the ids of studies stored before they existed.
    workload = out.get("workload", {})
    if workload.get("dataset_name") != "longdoc":
        for key in LONGDOC_FIELDS:
            workload.pop(key, None)
    for w in [workload, *(s for s in out.get("scenarios") or [] if isinstance(s, dict))]:
        for key, default in ADDED_WORKLOAD_DEFAULTS.items():
            if key in w and w[key] == default:
                del w[key]
    return out


def spec_id(dump: Mapping[str, Any]) -> str:
    """12 hex digits naming what the spec measures: equal ids, comparable trials."""
    text = json.dumps(_measured_part(canonical(dump)), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for k, v in data.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out or {prefix: {}}
    return {prefix: data}


def _show(value: Any) -> str:
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    return "unset" if value is None else json.dumps(value)


def changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What changed in the measured part, as `path: old → new`, in a stable order."""
    a = _flatten(_measured_part(canonical(old)))
    b = _flatten(_measured_part(canonical(new)))
    return [
        _change(path, a.get(path), b.get(path))
        for path in sorted(set(a) | set(b))
        if a.get(path) != b.get(path)
    ]


def _change(path: str, old: Any, new: Any) -> str:
    if path.startswith(CONTENTS) and old is not None and new is not None:
        return f"{path.removeprefix(CONTENTS)}: the file's contents changed"
    return f"{path}: {_show(old)} → {_show(new)}"


def _current_dump(study: Any) -> dict[str, Any] | None:
    data = study.user_attrs.get(tr.SPEC)
    return dict(data) if data is not None else None


def check(study: Any, spec: StudySpec, *, accept_changes: bool = False) -> str:
    """What `bind` would refuse, without writing anything; return the new spec's id.

    A run checks when it opens the study, and binds only once it holds the study's lock: a
    second run that the lock refuses must not have switched the live run's current spec.
    """
    new = spec.model_dump()
    new_id = spec_id(new)
    stored = _current_dump(study)
    if stored is None:
        return new_id
    current = study.user_attrs.get(tr.SPEC_ID) or spec_id(stored)
    if current == new_id:
        return new_id
    _check_storable(stored_spec(stored, spec.name), spec)
    if not accept_changes:
        diff = changes(stored, new)
        shown = "; ".join(diff[:SHOWN_CHANGES])
        more = f" (and {len(diff) - SHOWN_CHANGES} more)" if len(diff) > SHOWN_CHANGES else ""
        raise UserError(
            f"the study file changed what study {spec.name!r} measures ({shown}{more}): "
            "give the study a new name, or run with --accept-changes to start a new baseline "
            "under the new file (its trials are never compared with the old ones)"
        )
    return new_id


def bind(study: Any, spec: StudySpec, *, accept_changes: bool = False) -> str:
    """Tie this run to the study's stored spec; return the spec id its trials are stored under.

    A study made by an older tuner has one spec and no id: its trials belong to that spec.
    """
    new_id = check(study, spec, accept_changes=accept_changes)
    stored = _current_dump(study)
    if stored is not None and tr.SPEC_ID not in study.user_attrs:
        legacy = spec_id(stored)
        study.set_user_attr(tr.LEGACY_SPEC_ID, legacy)
        _remember(study, legacy, stored)
    new = spec.model_dump()
    _remember(study, new_id, new)
    study.set_user_attr(tr.SPEC, new)
    study.set_user_attr(tr.SPEC_ID, new_id)
    return new_id


def _storable_shape(p: Any) -> tuple:
    """What Optuna's storage requires to stay the same for a parameter name within one study:
    the kind of distribution, its log setting, and a categorical's choices."""
    if p.type in ("int", "float"):
        return (p.type, p.log)
    if p.type == "bool":
        return ("categorical", (False, True))
    return ("categorical", tuple(p.choices or ()))


def _check_storable(old: StudySpec, new: StudySpec) -> None:
    for name, p in new.search_space.parameters.items():
        before = old.search_space.parameters.get(name)
        if before is not None and _storable_shape(before) != _storable_shape(p):
            raise UserError(
                f"search_space.parameters.{name}: its type, log setting or choices changed, "
                "which one Optuna study cannot hold for the same parameter name: give the "
                "study a new name"
            )


def _remember(study: Any, sid: str, dump: Mapping[str, Any]) -> None:
    study.set_user_attr(tr.SPEC_BY_ID + sid, dict(dump))


def current_id(study: StudyRecord) -> str | None:
    sid = study.spec_id
    if sid is None and study.spec is not None:
        sid = spec_id(study.spec)
    return sid


def trial_spec_id(study: StudyRecord, point: TrialPoint) -> str | None:
    """The spec a trial ran under (a trial from before specs were tracked: the first one)."""
    return point.spec_id or study.legacy_spec_id or current_id(study)


def owner_spec_id(
    study: StudyRecord, point: TrialPoint, by_number: Mapping[int, TrialPoint]
) -> str | None:
    """The spec a trial belongs to, queued ones included: a trial queued without an id (a
    `--confirm` re-run or a retry queued by an older tuner) belongs to the spec of the trial
    it re-measures, never to whichever spec is current when it is taken (issue 24, item 4).
    None: a trial queued by hand (Optuna's `enqueue_trial`, no id, nothing it re-measures),
    which a run of any spec may take."""
    if point.spec_id is None:
        origin_number = point.confirm_of if point.confirm_of is not None else point.record.retry_of
        origin = by_number.get(origin_number) if origin_number is not None else None
        if origin is not None and origin.number != point.number:
            return trial_spec_id(study, origin)
        if point.state == "WAITING" and origin_number is None:
            return None
    return trial_spec_id(study, point)


def of_spec(study: StudyRecord, points: list[TrialPoint], sid: str | None) -> list[TrialPoint]:
    """The trials of spec `sid`, and queued ones it may take: a run compares and counts only
    these."""
    by_number = {p.number: p for p in points}
    return [p for p in points if owner_spec_id(study, p, by_number) in (sid, None)]


def of_current(study: StudyRecord, points: list[TrialPoint]) -> list[TrialPoint]:
    """The trials measured under the study's current spec: what results read."""
    return of_spec(study, points, current_id(study))


def spec_for(study: StudyRecord, point: TrialPoint) -> StudySpec:
    """The stored spec a trial was measured under: what its command is built from."""
    sid = trial_spec_id(study, point)
    data = study.specs_by_id.get(sid) if sid else None
    data = data if data is not None else study.spec
    if data is None:
        raise UserError(f"trial {point.number} has no stored study spec (not made by tuner)")
    return stored_spec(data, str(data.get("name")))


def study_name(spec: StudySpec, planned: bool) -> str:
    """The stored study of a study file: `tuner plan`'s predictions live beside the real one
    (PLAN_STUDY_SUFFIX)."""
    return f"{spec.name}{tr.PLAN_STUDY_SUFFIX}" if planned else spec.name

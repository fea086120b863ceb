"""The study file a trial was measured under: stored with the study, compared on every resume.

A spec has two parts (docs/reliability.md, "Re-judging"):
- what a trial *measures*: every field that changes a measurement (that section's table lists
  them; the named files count by their contents: `file_contents`, `tuner.spec.contents`). Its
  hash is the `spec_id` (the measurement id): trials are grouped, compared and counted by it,
  and record it;
- how trials are *judged* (`JUDGING`: weights, aggregate, SLOs, the scenarios' weights and SLOs;
  in capacity mode the SLOs choose the rates the search runs, so there they are measurement).
  Its hash is the `judging_id`.

Every spec a study has run under is kept, by measurement id, with its latest judging:
- a change to comparable parts only (budget, sampler, timeouts, description) goes on;
- a change to the judging only is taken: every read re-scores the stored trials from their
  metrics under it (`of_spec` → `tuner.trial.scoring.rejudge`), the baseline stays;
- any change to the measurement stops the run with one line, unless `--accept-changes`: then the
  new spec gets its own id, its own baseline, and nothing is compared across the two;
- results read the current spec's trials; a command is built from the printed trial's stored
  spec, not from today's file.

The ids and the differences themselves: `tuner.trial.spec_ids`.

Pure apart from reading and writing study user attrs (duck-typed: `user_attrs`,
`set_user_attr`).
"""

from __future__ import annotations

from collections.abc import Mapping

from tuner.errors import UserError
from tuner.spec.sections import ParameterSpec
from tuner.spec.study import StudySpec, stored_spec
from tuner.trial import keys as tr
from tuner.trial import scoring
from tuner.trial.point import TrialPoint
from tuner.trial.record import AttrsHolder

# re-exported: the ids are read through this module (`specs.spec_id`, ...)
from tuner.trial.spec_ids import changes as changes
from tuner.trial.spec_ids import judging_changes
from tuner.trial.spec_ids import judging_id as judging_id
from tuner.trial.spec_ids import spec_id as spec_id
from tuner.trial.study import StudyRecord

SHOWN_CHANGES = 4


def _current_dump(study: AttrsHolder) -> dict[str, object] | None:
    data = study.user_attrs.get(tr.SPEC)
    return dict(data) if isinstance(data, Mapping) else None


def check(study: AttrsHolder, spec: StudySpec, *, accept_changes: bool = False) -> str:
    """What `bind` would refuse, without writing anything; return the new spec's id.

    A run checks when it opens the study, and binds only once it holds the study's lock: a
    second run that the lock refuses must not have switched the live run's current spec.
    """
    new = spec.model_dump()
    new_id = spec_id(new)
    stored = _current_dump(study)
    if stored is None:
        return new_id
    if study.user_attrs.get(tr.SPEC_ID) == new_id:
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


def bind(study: AttrsHolder, spec: StudySpec, *, accept_changes: bool = False) -> str:
    """Tie this run to the study's stored spec; return the spec id its trials are stored under."""
    new_id = check(study, spec, accept_changes=accept_changes)
    new = spec.model_dump()
    _remember(study, new_id, new)
    study.set_user_attr(tr.SPEC, new)
    study.set_user_attr(tr.SPEC_ID, new_id)
    return new_id


def _storable_shape(p: ParameterSpec) -> tuple[object, ...]:
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


def _remember(study: AttrsHolder, sid: str, dump: Mapping[str, object]) -> None:
    study.set_user_attr(tr.SPEC_BY_ID + sid, dict(dump))


def judging_change(study: AttrsHolder, spec: StudySpec) -> list[str]:
    """What `spec` changes in how the study's current measurement is judged ([]: nothing, or
    another measurement): the stored trials are then re-scored, not re-measured."""
    stored = _current_dump(study)
    if stored is None:
        return []
    try:
        if study.user_attrs.get(tr.SPEC_ID) != spec_id(spec.model_dump()):
            return []
        return judging_changes(stored, spec.model_dump())
    except UserError:
        return []


def trial_spec_id(study: StudyRecord, point: TrialPoint) -> str | None:
    """The measurement a trial ran under (one queued by hand with no id: the current one)."""
    return point.spec_id or study.spec_id


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
    these; each judged under the spec's latest judging (`judged`)."""
    by_number = {p.number: p for p in points}
    mine = [p for p in points if owner_spec_id(study, p, by_number) in (sid, None)]
    return judged(study, mine, sid)


def judging_spec(study: StudyRecord, sid: str | None) -> StudySpec | None:
    """The spec whose judging the trials of measurement `sid` are read under: the latest
    stored under that id (the study's current spec for the current id). None: not readable."""
    data = study.spec if sid == study.spec_id else study.specs_by_id.get(sid or "")
    if data is None:
        return None
    try:
        return stored_spec(data, str(data.get("name")))
    except UserError:
        return None


def judged(study: StudyRecord, points: list[TrialPoint], sid: str | None) -> list[TrialPoint]:
    """The trials of measurement `sid`, scored and checked against the SLOs under its latest
    judging, from their stored metrics (`tuner.trial.scoring.rejudge`)."""
    spec = judging_spec(study, sid)
    return points if spec is None else scoring.rejudge(points, spec, judging_id(spec))


def judged_all(study: StudyRecord, points: list[TrialPoint]) -> list[TrialPoint]:
    """Every trial, each judged under its own measurement's latest judging (`tuner trials`)."""
    groups: dict[str | None, list[TrialPoint]] = {}
    for p in points:
        groups.setdefault(trial_spec_id(study, p), []).append(p)
    out = {p.number: p for sid, group in groups.items() for p in judged(study, group, sid)}
    return [out[p.number] for p in points]


def of_current(study: StudyRecord, points: list[TrialPoint]) -> list[TrialPoint]:
    """The trials measured under the study's current spec: what results read."""
    return of_spec(study, points, study.spec_id)


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

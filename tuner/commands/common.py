"""Options and openers shared by the study commands and the results commands."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    import optuna

    from tuner.results.verifies import VerifyDoc
    from tuner.spec.outputs import Kept
    from tuner.spec.study import StudySpec
    from tuner.store.storage import Store

StudyFile = Annotated[Path, typer.Argument(help="The study file (YAML).", show_default=False)]
Storage = Annotated[
    str | None,
    typer.Option("--storage", help="SQLAlchemy URL; default $TUNER_STORAGE or sqlite:///tuner.db."),
]
AcceptChanges = Annotated[
    bool,
    typer.Option(
        "--accept-changes",
        help="The study file changed what a trial measures: start a new baseline under it.",
    ),
]
Simulated = Annotated[
    bool, typer.Option("--simulated", help="Read the planner's simulated study (`tuner plan`).")
]

Force = Annotated[
    bool,
    typer.Option(
        "--force",
        help="Replace an existing file (never the study file, its database, or a device).",
    ),
]

# the preview's limit is CPU time (`tuner.scaffold.preview.BUDGET_S`, 20 s): a longdoc
# capacity study's `init` waited 99 s of wall time for it on a box loaded ~10 (walk of issue 49)
NoPreview = Annotated[
    bool,
    typer.Option(
        "--no-preview",
        help="Skip the simulated plan preview (up to about 20 s of CPU; longer on a busy box).",
    ),
]

Wide = Annotated[
    bool,
    typer.Option("--wide", help="Every column, whole headers and lines: do not fit the terminal."),
]


def load_study_file(
    study_file: Path,
    *,
    check: Callable[[StudySpec], None] | None = None,
    change: Callable[[StudySpec], StudySpec] | None = None,
) -> StudySpec:
    """The validated spec, `change` applied, `check` passed; no database touched yet."""
    import optuna

    from tuner.spec.study import load_study_spec

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the tuner reports progress itself
    spec = load_study_spec(study_file)
    if change is not None:
        spec = change(spec)
    if check is not None:
        check(spec)
    return spec


def open_store(spec: StudySpec, storage: str | None, *, readonly: bool = False) -> Store:
    """The study's store: `--storage`, else the study file's, else the default (created here
    unless `readonly`)."""
    from tuner.store.storage import Store

    return Store(storage or spec.storage, readonly=readonly)


def stored_verifies(study_name: str, study_file: Path, storage: str | None) -> Sequence[VerifyDoc]:
    """The study's stored `tuner verify` documents, oldest first (`tuner.store.verifies`),
    from the store `open_stored_study` opened the study in (`--storage`, else the file's)."""
    from tuner.store.verifies import verify_history

    store = open_store(load_study_file(study_file), storage, readonly=True)
    try:
        return verify_history(store, study_name)
    finally:
        store.close()


def open_stored_study(
    study_file: Path, storage: str | None, simulated: bool | None
) -> tuple[optuna.Study, StudySpec]:
    """The stored study for a study file, and the spec it was run with (kept in the study);
    `simulated` None: the measured study of a command that has no `--simulated` (`verify`,
    `calibrate`: they need measured trials, never `tuner plan`'s predictions)."""
    study, spec, _ = open_stored_study_files(study_file, storage, simulated)
    return study, spec


def open_stored_study_files(
    study_file: Path, storage: str | None, simulated: bool | None
) -> tuple[optuna.Study, StudySpec, list[Kept]]:
    """`open_stored_study`, and the files a command's output must never replace (`Kept`,
    `tuner.spec.outputs`): the study file, its SQLite database and SQLite's files beside it."""
    from tuner.results.study_file import STUDY_FILE
    from tuner.store.storage import spec_of, sqlite_file
    from tuner.trial.specs import study_name

    STUDY_FILE.set(str(study_file))  # the file the suggested commands name
    spec = load_study_file(study_file)
    store = open_store(spec, storage, readonly=True)
    _say_planned_only(store, spec, study_file, simulated)
    study = store.load_study(study_name(spec, bool(simulated)))
    _say_judging_change(study_file, study, spec)
    kept: list[Kept] = [(study_file, "the study file")]
    database = sqlite_file(store.url)
    if database is not None:
        kept.append((database, "the study's database"))
        kept += [
            (database.with_name(database.name + end), "a file of the study's database")
            for end in ("-wal", "-shm", "-journal")
        ]
    return study, spec_of(study), kept


def _say_planned_only(
    store: Store, spec: StudySpec, study_file: Path, simulated: bool | None
) -> None:
    """A study `tuner plan` stored but `tuner run` never ran: one line that names `--simulated`
    (the planned study is stored beside the real one under its own name), not "no study"; to a
    command without `--simulated` (`simulated` None), that it needs measured trials."""
    from tuner.errors import UserError
    from tuner.trial.specs import study_name

    names = store.study_names()
    real, planned = study_name(spec, False), study_name(spec, True)
    if simulated or real in names or planned not in names:
        return
    if simulated is None:  # verify, calibrate: a plan's predictions are nothing to compare with
        raise UserError(
            f"no study named {real!r} in {store.url}: only `tuner plan`'s simulated one, "
            f"{planned!r}, whose figures are predictions; this command needs measured trials, "
            f"which `tuner run {study_file}` stores (best, trials, pareto, export and report "
            "read the plan with --simulated)"
        )
    raise UserError(
        f"no study named {real!r} in {store.url}: only `tuner plan`'s simulated one, "
        f"{planned!r}; add --simulated to read it (best, trials, pareto, export, report), "
        f"or `tuner run {study_file}` to run the study"
    )


def _say_judging_change(study_file: Path, study: optuna.Study, spec: StudySpec) -> None:
    """A study file whose objective or SLOs changed since the last run: the stored trials are
    judged as that run left them until `tuner run` re-scores them; say so, on stderr. One
    whose measurement changed (the workload, a flag): the trials shown were measured under
    the stored spec, not the file's; say so too."""
    from tuner.trial import StudyRecord
    from tuner.trial.specs import SHOWN_CHANGES, changes, judging_change, spec_id

    record, new = StudyRecord.of(study), spec.model_dump()
    measured = []
    if record.spec is not None and record.spec_id != spec_id(new):
        measured = changes(record.spec, new)
    if measured:
        more = f" and {len(measured) - SHOWN_CHANGES} more" if len(measured) > SHOWN_CHANGES else ""
        typer.echo(
            f"note: {study_file} changes what a trial measures since these trials ran "
            f"({'; '.join(measured[:SHOWN_CHANGES])}{more}): shown as measured under the "
            f"study's stored spec; `tuner run {study_file}` refuses the file until "
            "--accept-changes starts a new baseline under it",
            err=True,
        )
    change = judging_change(study, spec)
    if change:
        typer.echo(
            f"note: {study_file} changes how trials are judged ({'; '.join(change)}); shown "
            f"as the last run judged them: `tuner run {study_file}` re-scores them (nothing "
            "is measured again)",
            err=True,
        )


def duration_s(flag: str, text: str | None) -> float | None:
    from tuner.errors import UserError
    from tuner.spec.parsing import parse_duration_s

    if text is None:
        return None
    try:
        return parse_duration_s(text)
    except ValueError as exc:
        raise UserError(f"{flag}: {exc}") from None

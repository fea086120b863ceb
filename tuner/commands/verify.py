"""`tuner verify`: re-measure a running engine against what the study promised (docs/verify.md).

Exit codes (`tuner.verify.compare`): 0 holds; 1 no verdict (every request failed, or the time
cap stopped it); 2 a user mistake (nothing sent, nothing written); 3 drift (a figure worse
outside its interval, or the engine is not the one measured); 4 breaks the SLO.
"""

from __future__ import annotations

import json
import math
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tuner.commands.common import Storage, StudyFile
from tuner.errors import UserError
from tuner.spec.workload import SEED_LIMIT

MAX_TIME_S = 7 * 24 * 3600  # a verify is a check, not a soak: and time.monotonic() + 1e308 is inf

if TYPE_CHECKING:
    from tuner.verify.session import Target

Opt = typer.Option


def verify(
    study_file: StudyFile,
    base_url: Annotated[
        str | None, Opt("--base-url", help="The running engine, e.g. http://127.0.0.1:8000.")
    ] = None,
    storage: Storage = None,
    max_requests: Annotated[
        int, Opt("--max-requests", help="Most requests sent in all (the test request included).")
    ] = 200,
    max_rate: Annotated[
        float | None,
        Opt("--max-rate", help="Most requests/s on average (default: the study's rate)."),
    ] = None,
    max_time: Annotated[
        float, Opt("--max-time", help="Seconds before the run is stopped (no verdict then).")
    ] = 300.0,
    allow_host: Annotated[
        str | None,
        Opt("--allow-host", help="The host of a --base-url that is not on this machine."),
    ] = None,
    fmt: Annotated[str, Opt("--format", help="text or json (for a monitoring job).")] = "text",
    no_store: Annotated[
        bool, Opt("--no-store", help="Do not add this verify to the study's history.")
    ] = False,
    api_key: Annotated[
        str | None, Opt(envvar="OPENAI_API_KEY", show_envvar=False, help="Bearer token.")
    ] = None,
    request_log: Annotated[
        Path | None,
        Opt("--request-log", help="Your traffic (JSONL, as `tuner bench` takes): its lengths."),
    ] = None,
    seed: Annotated[
        int | None,
        Opt("--seed", help="The prompts' seed (default: a fresh one each run, printed)."),
    ] = None,
    history: Annotated[
        bool, Opt("--history", help="Show the study's stored verifies instead (no engine).")
    ] = False,
) -> None:
    """Run the study's workload (within the caps) against a running engine, compare with the
    shipped config's stored figures and SLO, and say whether it holds (exit codes: 0 holds,
    1 no verdict, 3 drift, 4 breaks the SLO)."""
    from tuner.verify.caps import Caps, check_url

    if fmt not in ("text", "json"):
        raise UserError(f"unknown format {fmt!r}: choose one of text, json")
    if history:
        _show_history(study_file, storage, fmt)
        return
    if base_url is None:
        raise UserError("give --base-url URL, the running engine to verify (or --history)")
    if not 0 < max_time < math.inf or (max_rate is not None and not 0 < max_rate < math.inf):
        raise UserError("--max-time and --max-rate must be finite numbers > 0")
    if max_time > MAX_TIME_S:
        raise UserError(f"--max-time {max_time:g} s is over a week: give at most {MAX_TIME_S}")
    if seed is not None and not 0 <= seed < SEED_LIMIT:
        raise UserError(f"--seed {seed}: give 0 to {SEED_LIMIT - 1}")
    url = check_url(base_url, allow_host)
    caps = Caps(
        max_requests, max_rate, max_time, secrets.randbelow(SEED_LIMIT) if seed is None else seed
    )
    target, store_url = _target(study_file, storage)
    from tuner.verify.session import run_verify

    outcome = run_verify(target, url, caps, api_key, request_log)
    if fmt == "json":
        typer.echo(json.dumps(outcome.document, indent=2, default=str))
    else:
        typer.echo("\n".join(outcome.lines))
    if not no_store:
        from tuner.verify.stored import store_verify

        store_verify(store_url, target.study_name, outcome.document)
    raise typer.Exit(outcome.verdict.exit_code)


def _target(study_file: Path, storage: str | None) -> tuple[Target, str]:
    """The shipped config of the stored study, and the store's URL."""
    from tuner.commands.common import open_stored_study
    from tuner.store.storage import resolve_storage
    from tuner.verify.stored import shipped_target

    study, file_spec = open_stored_study(study_file, storage, simulated=None)
    return shipped_target(study), resolve_storage(storage or file_spec.storage)


def _show_history(study_file: Path, storage: str | None, fmt: str) -> None:
    """One line per stored verify, oldest first; `json`: the stored documents."""
    from tuner.commands.common import open_stored_study, stored_verifies
    from tuner.results.verifies import verify_lines

    study, _ = open_stored_study(study_file, storage, simulated=None)
    docs = stored_verifies(study.study_name, study_file, storage)
    if fmt == "json":
        typer.echo(json.dumps(docs, indent=2))
        return
    if not docs:
        typer.echo(f"study {study.study_name}: no verify stored yet")
    for line in verify_lines(docs):
        typer.echo(line)

"""The `tuner` command line. Kept thin: each command lives in `tuner.commands`."""

from __future__ import annotations

import errno
import re
import sqlite3
import sys
from typing import Any

import typer
from typer.core import TyperOption
from typer.exceptions import TyperException

from tuner.commands import bench, calibrate, check, init, results, sim, study, tools, verify
from tuner.errors import RunInterrupted, UserError

_value_type = TyperOption.display_type_rich


def _switch_shows_no_type(self: TyperOption, ctx: Any) -> str | None:  # typer's own click
    """A switch (`--no-pruning`, `--help`) takes no value: `--help` shows no `<bool>` beside it
    (typer 0.29 shows one for every option)."""
    return None if self.is_bool_flag else _value_type(self, ctx)


# a patch of typer's method: no type checker accepts one
TyperOption.display_type_rich = _switch_shows_no_type  # type: ignore[method-assign]

app = typer.Typer(
    name="tuner",
    help="Tune `vllm serve` flags with an Optuna study that restarts the engine per trial.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("init")(init.init)
app.command("bench")(bench.bench)
app.command("check")(check.check)
app.command("run")(study.run)
app.command("plan")(study.plan)
app.command("trials")(study.trials)
app.command("best")(study.best)
app.command("pareto")(results.pareto)
app.command("export")(results.export)
app.command("report")(results.report)
app.command("calibrate")(calibrate.calibrate)
app.command("verify")(verify.verify)
app.command("make-tiny-model")(tools.make_tiny_model)
app.add_typer(sim.app, name="sim")


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; user mistakes become one line on stderr and exit code 2."""
    try:
        rv = app(args=argv, standalone_mode=False)
    except UserError as exc:
        _fail(str(exc))
    except RunInterrupted as exc:
        then = (
            "its engine is stopped and it is recorded as not finished; `tuner run` on the same "
            "study redoes it"
            if exc.during
            else "the running trial (if any) is recorded as interrupted; run the same command "
            "again to continue"
        )
        _fail(f"{exc}: {then}", code=128 + exc.signum)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        _fail("aborted", code=130)
    except TyperException as exc:  # usage errors: unknown option, bad value, missing argument
        _fail(exc.format_message(), code=getattr(exc, "exit_code", 2))
    except KeyboardInterrupt:
        _fail("interrupted by SIGINT", code=130)
    except Exception as exc:
        message = storage_full(exc)
        if message is None:
            raise
        _fail(message)
    if rv == 130:  # typer's word for a KeyboardInterrupt outside a study run
        _fail("interrupted by SIGINT", code=130)
    sys.exit(rv if isinstance(rv, int) else 0)


_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC)})
_FULL_DB = ("database or disk is full", "No space left on device", "could not extend file")
_RERUN = "free space and run again: the interrupted trial is then recovered"


def storage_full(exc: BaseException | None) -> str | None:
    """One line for an error that a full disk caused, anywhere in the exception's chain
    (Optuna wraps SQLAlchemy's error, which wraps the driver's); None for anything else.

    SQLite says "database or disk is full" on ENOSPC, and "disk I/O error" when a write fails
    otherwise (EFBIG: over a file size limit); PostgreSQL "could not extend file ...".
    """
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in _FULL_ERRNOS:
            where = f" {exc.filename}" if exc.filename else ""
            return f"cannot write{where}: disk full ({exc.strerror or exc}); {_RERUN}"
        if isinstance(exc, sqlite3.OperationalError) or type(exc).__name__ in (
            "OperationalError",
            "DiskFull",
        ):
            text = re.sub(r"^\([\w.]+\) ", "", (str(exc).splitlines() or [""])[0])
            if any(p in text for p in _FULL_DB):
                return f"storage full: cannot write the database ({text}); {_RERUN}"
            if "disk I/O error" in text:
                return f"cannot write the database: {text} (is the disk full?); {_RERUN}"
        exc = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    return None


def _fail(message: str, code: int = 2) -> None:
    print(f"tuner: error: {' '.join(message.split())}", file=sys.stderr)
    sys.exit(code)


if __name__ == "__main__":
    main()

"""The `tuner` command line. Kept thin: each command lives in `tuner.commands`."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
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


def _paragraphs(command: Callable[..., Any]) -> list[str]:
    """The command's docstring, each paragraph on one line."""
    doc = inspect.cleandoc(command.__doc__ or "")
    return [" ".join(part.split()) for part in doc.split("\n\n")]


def _help_in_paragraphs(group: typer.Typer) -> None:
    """Each command's `--help` (and its line in the group's list) from its docstring, one line
    a paragraph: typer's rich help keeps a docstring's line breaks after the first paragraph
    and in the list, so at 80 columns it broke sentences mid-way; rich wraps each line."""
    for info in group.registered_commands:
        if info.callback is not None and info.help is None:
            paragraphs = _paragraphs(info.callback)
            info.help, info.short_help = "\n\n".join(paragraphs), paragraphs[0]


_help_in_paragraphs(app)
_help_in_paragraphs(sim.app)


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
        from tuner.store.driver_errors import storage_full  # the drivers load on this path only

        message = storage_full(exc)
        if message is None:
            raise
        _fail(message)
    if rv == 130:  # typer's word for a KeyboardInterrupt outside a study run
        _fail("interrupted by SIGINT", code=130)
    sys.exit(rv if isinstance(rv, int) else 0)


def _fail(message: str, code: int = 2) -> None:
    print(f"tuner: error: {' '.join(message.split())}", file=sys.stderr)
    sys.exit(code)


if __name__ == "__main__":
    main()

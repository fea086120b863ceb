"""The `tuner` command line. Kept thin: each command lives in `tuner.commands`."""

from __future__ import annotations

import sys

import typer
from typer.exceptions import TyperException

from tuner.commands import bench, results, sim, study, tools
from tuner.errors import RunInterrupted, UserError

app = typer.Typer(
    name="tuner",
    help="Tune `vllm serve` flags with an Optuna study that restarts the engine per trial.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("bench")(bench.bench)
app.command("run")(study.run)
app.command("plan")(study.plan)
app.command("trials")(study.trials)
app.command("best")(study.best)
app.command("pareto")(results.pareto)
app.command("export")(results.export)
app.command("report")(results.report)
app.command("make-tiny-model")(tools.make_tiny_model)
app.add_typer(sim.app, name="sim")


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; user mistakes become one line on stderr and exit code 2."""
    try:
        rv = app(args=argv, standalone_mode=False)
    except UserError as exc:
        _fail(str(exc))
    except RunInterrupted as exc:
        _fail(
            f"{exc}: the running trial (if any) is recorded as interrupted; run the same "
            "command again to continue",
            code=128 + exc.signum,
        )
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        _fail("aborted", code=130)
    except TyperException as exc:  # usage errors: unknown option, bad value, missing argument
        _fail(exc.format_message(), code=getattr(exc, "exit_code", 2))
    except KeyboardInterrupt:
        _fail("interrupted by SIGINT", code=130)
    if rv == 130:  # typer's word for a KeyboardInterrupt outside a study run
        _fail("interrupted by SIGINT", code=130)
    sys.exit(rv if isinstance(rv, int) else 0)


def _fail(message: str, code: int = 2) -> None:
    print(f"tuner: error: {' '.join(message.split())}", file=sys.stderr)
    sys.exit(code)


if __name__ == "__main__":
    main()

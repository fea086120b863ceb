"""`--help` that a person can act on (issue 21, §5): no `<bool>` beside a switch, the built-in
model and GPU names where a model or a GPU is asked, and what `--confirm` costs."""

from __future__ import annotations

import typer
from typer.testing import CliRunner

from tuner.cli import app
from tuner.sim.profiles import BUILTIN_MODELS, GPUS


def _commands(group: object, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command's words (`sim serve`), sub-commands included."""
    out = []
    for name, cmd in group.commands.items():  # typer's own (vendored) click groups
        out.append((*prefix, name))
        if hasattr(cmd, "commands"):
            out += _commands(cmd, (*prefix, name))
    return out


def _help(*words: str) -> str:
    done = CliRunner().invoke(app, [*words, "--help"], env={"COLUMNS": "250"})
    assert done.exit_code == 0, done.output
    return " ".join(done.output.split())


def test_no_bool_placeholder_on_any_switch() -> None:
    commands = _commands(typer.main.get_command(app))
    assert ("sim", "serve") in commands and ("run",) in commands
    for words in [(), *commands]:
        text = _help(*words)
        assert "<bool>" not in text, f"tuner {' '.join(words)} --help: {text}"
    assert "--no-pruning Run every trial to the end" in _help("run")  # nothing in between


def test_builtin_names_where_a_model_or_gpu_is_asked() -> None:
    serve = _help("sim", "serve")
    for name in [*BUILTIN_MODELS, *GPUS]:
        assert name in serve, name
    profile = _help("sim", "profile")
    assert all(name in profile for name in GPUS)


def test_confirm_states_its_cost() -> None:
    run = _help("run")
    assert "K × 3 more engine runs" in run and "2 more engine starts" in run

"""The CLI's commands, one module per area: parse the options, call the packages, print.

Modules (`tuner.cli` registers them on the typer app):
- `init`: `tuner init`, which drafts a study file from the box (`tuner.scaffold`);
- `check`: `tuner check`, the preflight (every problem of a study in one pass, its cost);
- `study`: `tuner run`, `tuner plan`, `tuner trials`, `tuner best` (a study from its file);
- `run_output`: what `tuner run` and `tuner plan` print once the trials end, and `tuner best`'s
  config;
- `results`: `tuner pareto`, `tuner export`, `tuner report` (read-only);
- `bench`: `tuner bench`, one workload against a running server, like `vllm bench serve`;
- `bench_output`: what `tuner bench` prints and saves (vLLM's result table and JSON keys);
- `verify`: `tuner verify`, a running engine re-measured against the study's figures;
- `calibrate`: `tuner calibrate`, the simulator's profile fitted to a study's trials;
- `sim`: `tuner sim serve` and `tuner sim profile`;
- `tools`: `tuner make-tiny-model`;
- `common`: options and openers shared by the study and results commands.

What may be assumed: a user's mistake raises `UserError`, which `tuner.cli` turns into one line
on stderr and exit 2; read-only commands never import the run loop (an import-linter
contract).

The one place where function-local imports are deliberate: `tuner --help`, and the one-line
errors for bad input, must not wait for optuna, pandas, plotly, transformers or the study
loop to import, so each command imports what it uses inside its function, and this package
re-exports only the command modules (which import typer alone at their top). Everywhere else
in `tuner/`, imports sit at the top of the module, apart from a few slow, optional or ordered
ones that say why where they are (transformers, matplotlib, pynvml).
"""

from tuner.commands import (
    bench,
    calibrate,
    check,
    common,
    init,
    results,
    sim,
    study,
    tools,
    verify,
)

__all__ = [
    "bench",
    "calibrate",
    "check",
    "common",
    "init",
    "results",
    "sim",
    "study",
    "tools",
    "verify",
]

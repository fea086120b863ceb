"""The packages' `__init__`s: what they re-export resolves, and re-exporting stays cheap.

import-linter checks the imports written in each module; it does not see that importing
`tuner.sim.planner` first runs `tuner/sim/__init__.py`. These tests import in a fresh
interpreter and look at what actually got loaded.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGES = [
    "spec",
    "measure",
    "engine",
    "workload",
    "sim",
    "store",
    "runners",
    "fidelity",
    "run",
    "results",
    "results.report",
    "scaffold",
    "commands",
    "tools",
]


def loaded_after(*modules: str) -> set[str]:
    """The modules loaded by importing `modules` in a fresh interpreter."""
    code = (
        "import importlib, json, sys\n"
        f"for m in {list(modules)!r}: importlib.import_module(m)\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout))


@pytest.mark.parametrize("name", PACKAGES)
def test_every_package_says_what_it_owns_and_its_exports_resolve(name):
    package = importlib.import_module(f"tuner.{name}")
    assert package.__doc__ and "Modules" in package.__doc__, name
    exported = package.__all__
    assert all(not n.startswith("_") and hasattr(package, n) for n in exported), exported


def test_the_simulation_core_loads_no_http_asyncio_cli_or_study_file_through_its_package():
    core = ["tuner.sim.planner", "tuner.sim.engine", "tuner.sim.fit", "tuner.sim.profile_file"]
    forbidden = {"aiohttp", "httpx", "asyncio", "typer", "rich"}
    forbidden |= {"tuner.spec.study", "tuner.spec.sections", "tuner.sim.server"}
    assert loaded_after(*core) & forbidden == set()


def test_the_cli_and_bench_checks_stay_light():
    assert (
        loaded_after("tuner.cli") & {"optuna", "pandas", "plotly", "transformers", "numpy"} == set()
    )
    assert "tuner.run.loop" not in loaded_after("tuner.run.checks")  # `tuner bench` imports it


def test_a_study_is_checked_before_scipy_loads():
    # `tuner run`/`tuner check` import the preflight first: a refusal there takes ~0.7 s of
    # CPU, not the ~1.3 s that scipy's optimize and stats add (the simulator's fit and the
    # screen's Sobol design import them when they first run).
    assert "scipy" not in loaded_after("tuner.run.preflight", "tuner.run.session")


def test_the_trial_attr_names_are_exported_by_a_literal_list():
    """`tuner.trial.keys.__all__` is written out (a type checker cannot see a computed one),
    and it names every attr constant the module defines, so `from tuner.trial import *` does."""
    import ast

    import tuner.trial.keys as keys

    tree = ast.parse(Path(keys.__file__).read_text())
    literal = [
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and [t.id for t in node.targets] == ["__all__"]
    ]
    assert len(literal) == 1 and isinstance(literal[0], ast.List), "__all__ is not a literal"
    assert sorted(keys.__all__) == sorted(n for n in dir(keys) if n.isupper())

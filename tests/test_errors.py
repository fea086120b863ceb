"""One exception tree: every exception class `tuner` defines derives from `TunerError` (but
`tuner.run.signals.Interrupted`, a KeyboardInterrupt on purpose) and is drawn in errors.py's
tree. Read from the source with `ast` (no module of the tuner is imported to find them)."""

from __future__ import annotations

import ast
import functools

import tuner.errors
from tuner.errors import TunerError
from tuner_testing import REPO

BUILTIN = {"Exception", "ValueError", "RuntimeError", "KeyboardInterrupt", "BaseException"}
NOT_TUNER_ERRORS = {"tuner.run.signals.Interrupted"}  # a KeyboardInterrupt: see errors.py


@functools.cache
def exception_classes() -> dict[str, tuple[str, list[str]]]:
    """Every class of the package that is an exception: name → (dotted home, base names)."""
    classes: dict[str, tuple[str, list[str]]] = {}
    for path in sorted((REPO / "tuner").rglob("*.py")):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = [b.id if isinstance(b, ast.Name) else ast.unparse(b) for b in node.bases]
                classes[node.name] = (f"{module}.{node.name}", bases)
    found: dict[str, tuple[str, list[str]]] = {}
    grew = True
    while grew:
        grew = False
        for name, (home, bases) in classes.items():
            if name not in found and any(b in BUILTIN or b in found for b in bases):
                found[name] = (home, bases)
                grew = True
    return found


def test_the_scan_finds_the_package_s_exceptions() -> None:
    found = exception_classes()
    assert {"UserError", "EngineStartFailed", "BenchmarkAborted", "Interrupted"} <= set(found)


def test_every_exception_derives_from_tuner_error_and_is_in_the_tree() -> None:
    found = exception_classes()
    tree = tuner.errors.__doc__ or ""

    def derives(name: str) -> bool:
        return name == "TunerError" or any(derives(b) for b in found[name][1] if b in found)

    for name, (home, _) in found.items():
        assert f" {name} " in tree, f"{home} is not drawn in errors.py's tree"
        assert derives(name) != (home in NOT_TUNER_ERRORS), f"{home}: not under TunerError"


def test_the_tree_s_classes_are_tuner_errors_at_run_time() -> None:
    from tuner.engine.failures import EngineStartFailed
    from tuner.errors import EngineRefused, NotReady, RunInterrupted, UserError
    from tuner.workload.benchmark import BenchmarkAborted, BenchmarkPruned

    for cls in (UserError, NotReady, RunInterrupted, EngineRefused, EngineStartFailed):
        assert issubclass(cls, TunerError)
    assert issubclass(BenchmarkAborted, RuntimeError) and issubclass(BenchmarkAborted, TunerError)
    assert issubclass(BenchmarkPruned, TunerError) and issubclass(EngineRefused, ValueError)

"""The wheel holds the product only: the test helpers are the `tuner_testing` distribution
(support/), never a package of `tuner` (docs/architecture.md, "Test helpers").

Cheap: it asks setuptools' own package discovery, with the config in pyproject.toml, which
packages `pip wheel .` puts in the wheel, instead of building one."""

from __future__ import annotations

import tomllib
from pathlib import PurePosixPath

from setuptools import find_packages

from tuner_testing import REPO

TEST_ONLY = {"testing", "tuner_testing", "postgres_env"}


def wheel_packages() -> list[str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    find = config["tool"]["setuptools"]["packages"]["find"]
    return find_packages(where=str(REPO), include=find["include"], exclude=find.get("exclude", ()))


def test_the_wheel_holds_the_tuner_and_no_test_helpers() -> None:
    packages = wheel_packages()
    assert "tuner" in packages and "tuner.sim" in packages  # discovery does find the product
    assert all(p == "tuner" or p.startswith("tuner.") for p in packages), packages
    helpers = [p for p in packages if TEST_ONLY & set(p.split("."))]
    assert helpers == []
    modules = [
        f"{p}.{f.stem}"
        for p in packages
        for f in (REPO / p.replace(".", "/")).glob("*.py")
        if f.stem in TEST_ONLY
    ]
    assert modules == []


def test_the_package_s_data_files_are_in_the_wheel() -> None:
    """Every file of `tuner/` that is not Python (the report's templates, py.typed) matches
    pyproject's package-data: an installed tuner renders its report (`report.render`)."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["tuner"]
    root = REPO / "tuner"
    data = [
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and p.suffix not in (".py", ".pyc")
    ]
    assert "results/report/templates/report.html.j2" in data
    assert [f for f in data if not any(PurePosixPath(f).match(p) for p in patterns)] == []

"""The study file's plumbing: reading a YAML mapping, durations, and pydantic errors in a
user's words. Below `config_sections`, so every section can use it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from tuner.errors import UserError
from tuner.spec import yamlfile

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")


def parse_duration_s(text: str) -> float:
    """`8h`, `90m`, `3600s` or `3600` to seconds."""
    m = _DURATION.match(str(text))
    if not m:
        raise ValueError(f"bad duration {text!r}: use e.g. 8h, 90m, 3600s")
    value, unit = m.groups()
    return float(value) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[unit]


def read_yaml_mapping(path: Path, what: str) -> dict[str, Any]:
    """A user's YAML file that must hold a mapping; each problem is one UserError line."""
    if not path.is_file():
        raise UserError(f"{path}: {what} not found")
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise UserError(f"{path}: cannot read the {what}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise UserError(
            f"{path}: the {what} is not UTF-8 text (byte {exc.object[exc.start]:#04x} at "
            f"offset {exc.start}): save it as UTF-8"
        ) from None
    try:
        data = yamlfile.load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise UserError(f"{path}:{where} invalid YAML: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: {what} must be a YAML mapping")
    return data


_UNION_TAGS = {"str", "int", "float", "bool"}  # how pydantic names a Scalar's branches


def describe_validation_error(exc: ValidationError, *, as_flag: bool = False) -> str:
    """The one translation of a pydantic error into a user's words: `field.path: message`
    for the first bad field, or `--flag-name: message` for a CLI value (`as_flag`)."""
    errors = exc.errors()
    err = errors[0]
    path = list(err["loc"])
    if path and path[-1] in _UNION_TAGS:  # a Scalar: one line for the value, not per branch
        path.pop()
        branches = [e for e in errors if list(e["loc"][:-1]) == path]
        finite = [e for e in branches if e["type"] == "finite_number"]
        err = finite[0] if finite else {**err, "msg": "must be a string, a number or a bool"}
    loc = ".".join(str(p) for p in path)
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        msg = "unknown key"
    if as_flag and path:
        loc = "--" + str(path[0]).replace("_", "-")
    return f"{loc}: {msg}" if loc else msg

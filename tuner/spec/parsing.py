"""The study file's plumbing: reading a YAML mapping, durations, and pydantic errors in a
user's words. Below `config_sections`, so every section can use it."""

from __future__ import annotations

import re
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from tuner.errors import UserError
from tuner.spec import yamlfile
from tuner.spec.suggest import closest, did_you_mean

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")


def parse_duration_s(text: str) -> float:
    """`8h`, `90m`, `3600s` or `3600` to seconds."""
    m = _DURATION.match(str(text))
    if not m:
        raise ValueError(f"bad duration {text!r}: use e.g. 8h, 90m, 3600s")
    value, unit = m.groups()
    return float(value) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[unit]


def read_yaml_mapping(path: Path, what: str) -> dict[str, object]:
    """A user's YAML file that must hold a mapping; each problem is one UserError line."""
    if not path.is_file():
        raise UserError(f"{path}: {what} not found{near_file(path)}")
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


def near_file(path: Path) -> str:
    """` (did you mean 'studies/demo-sim.yaml'?)` for a file of a near name in its folder."""
    try:
        names = [p.name for p in path.parent.iterdir() if p.is_file()]
    except OSError:
        return ""
    near = closest(path.name, names)
    return f" (did you mean '{path.parent / near}'?)" if near else ""


def valid_keys(model: object, loc: Sequence[int | str]) -> list[str]:
    """The keys a study file may write at `loc` (a pydantic error's path), walking `model`'s
    fields through mappings, lists and optional sections; [] when the walk is lost."""
    ann = model
    for part in loc:
        ann = _section(ann)
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            field = ann.model_fields.get(str(part))
            if field is None:
                return []
            ann = field.annotation
        elif get_origin(ann) in (dict, list):
            ann = get_args(ann)[-1]
        else:
            return []
    ann = _section(ann)
    return list(ann.model_fields) if isinstance(ann, type) and issubclass(ann, BaseModel) else []


def _section(ann: object) -> object:
    """`X | None`, `Annotated[X, ...]`: X (the first branch that is a model, a dict or a list)."""
    while get_origin(ann) is Annotated or get_origin(ann) in (Union, types.UnionType):
        args = get_args(ann)
        if get_origin(ann) is Annotated:
            ann = args[0]
            continue
        nested = [a for a in args if get_origin(a) in (dict, list)]
        models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
        ann = (models or nested or [args[0]])[0]
    return ann


_UNION_TAGS = {"str", "int", "float", "bool"}  # how pydantic names a Scalar's branches


def describe_validation_error(
    exc: ValidationError, *, as_flag: bool = False, model: object = None
) -> str:
    """The one translation of a pydantic error into a user's words: `field.path: message`
    for the first bad field, or `--flag-name: message` for a CLI value (`as_flag`). With
    the `model` validated, an unknown key names the closest valid one."""
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
        if model is not None and path:
            msg += did_you_mean(str(path[-1]), valid_keys(model, path[:-1]))
    if as_flag and path:
        loc = "--" + str(path[0]).replace("_", "-")
    return f"{loc}: {msg}" if loc else msg

"""Checks of user input that must fail at load time, not after a trial (pure; docs/reliability.md).

Field checks raise ValueError (pydantic turns it into one line naming the file and field);
the checks `tuner run` applies before it starts anything raise UserError.
"""

from __future__ import annotations

import ipaddress
import re
import string
import types
from typing import Annotated, Union, get_args, get_origin

from pydantic import AfterValidator, BaseModel, ValidationInfo, field_validator

POSIX_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# vLLM's own, read by `vllm serve` and `tuner sim serve`; the tuner sets it from
# `engine.api_key_env`
API_KEY_ENV = "VLLM_API_KEY"
COMMAND_FIELDS = ("model", "python")
MAX_TIMEOUT_S = 7 * 86400.0  # a timeout past a week is a typo (and overflows some waits)
_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


def check_env_name(name: str) -> None:
    """An env var name that a shell export can carry unquoted: a POSIX name."""
    if not POSIX_NAME.fullmatch(name):
        raise ValueError(f"env name {name!r} is not a POSIX name ([A-Za-z_][A-Za-z0-9_]*)")
    if name == API_KEY_ENV:
        raise ValueError(
            f"do not put {API_KEY_ENV} in the study file: name the variable that holds "
            "the key in engine.api_key_env"
        )


def check_command_part(part: str) -> None:
    """Only `{model}` and `{python}` are substituted; `{{` and `}}` are literal braces."""
    try:
        fields = list(string.Formatter().parse(part))
    except ValueError as exc:
        raise ValueError(f"{part!r}: {exc} (write {{{{ or }}}} for a literal brace)") from None
    for _, field, spec, conversion in fields:
        if field is not None and (field not in COMMAND_FIELDS or spec or conversion):
            raise ValueError(
                f"{part!r}: only {{model}} and {{python}} may appear in braces "
                "(write {{ or }} for a literal brace)"
            )


def check_host(host: str) -> None:
    """An IPv4 address or a DNS hostname (RFC 1123). IPv6 is refused: the client's
    `http://HOST:PORT` URL does not bracket it."""
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        labels = host.split(".")
        if len(host) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
            raise ValueError(f"{host!r} is neither an IPv4 address nor a valid hostname") from None
        return
    if addr.version == 6:
        raise ValueError(f"{host!r}: IPv6 addresses are not supported; use an IPv4 address")


def check_model_name(value: str) -> str:
    """A model as vLLM takes it, a directory or a hub id (`org/name`): not blank, one
    printable line, and never a flag (`--help` would reach `vllm serve` and the export as
    one; a directory of that name is `./--help`)."""
    if not value.strip():
        raise ValueError("give a model: a directory or a Hugging Face id (org/name)")
    if not value.isprintable():
        raise ValueError(f"{value!r} is not a model name: one line of printable characters")
    if value.lstrip().startswith("-"):
        raise ValueError(
            f"{value!r} is not a model name: it starts with '-', so vLLM reads it as a flag "
            f"(a directory of that name: ./{value.strip()})"
        )
    return value


ModelName = Annotated[str, AfterValidator(check_model_name)]


def find_nul(data: object) -> str | None:
    """The dotted path of the first string holding a NUL character (which no argv or env
    entry can carry), or None. Iterative, and each container once (YAML aliases share)."""
    stack: list[tuple[str, object]] = [("", data)]
    seen: set[int] = set()
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            if "\0" in value:
                return path or "(top level)"
            continue
        if not isinstance(value, dict | list) or id(value) in seen:
            continue
        seen.add(id(value))
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in reversed(list(items)):
            if isinstance(key, str) and "\0" in key:
                return _join(path, repr(key))
            stack.append((_join(path, str(key)), item))
    return None


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _wants_number(ann: object) -> bool:
    """Whether a field of type `ann` takes a number and no bool (`int`, `float | None`)."""
    if get_origin(ann) is Annotated:
        return _wants_number(get_args(ann)[0])
    if get_origin(ann) in (Union, types.UnionType):
        branches = get_args(ann)
        return bool not in branches and any(_wants_number(a) for a in branches)
    return ann in (int, float)


def bool_for_number(ann: object, value: object) -> bool:
    """Whether `value` holds a YAML `true`/`false` where `ann` wants a number (pydantic's
    lax mode would take it as 1 or 0), at the top or inside a list or a mapping."""
    if isinstance(value, bool):
        return _wants_number(ann)
    origin, args = get_origin(ann), get_args(ann)
    if origin is Annotated or origin in (Union, types.UnionType):
        branches = args[:1] if origin is Annotated else args
        return any(bool_for_number(a, value) for a in branches if a is not type(None))
    if origin is list and isinstance(value, list):
        return any(bool_for_number(args[0], x) for x in value)
    if origin is dict and isinstance(value, dict):
        return any(bool_for_number(args[1], x) for x in value.values())
    return False


class NoBoolNumbers(BaseModel):
    """A section whose numbers must be numbers: `num_prompts: true` is refused, not read
    as 1 (strict mode would also refuse `1e3`, which YAML 1.1 reads as a string)."""

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_number(cls, v: object, info: ValidationInfo) -> object:
        field = cls.model_fields.get(info.field_name or "")
        if field is not None and bool_for_number(field.annotation, v):
            raise ValueError("a number is expected here, not true or false")
        return v

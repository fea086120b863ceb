"""Checks of user input that must fail at load time, not after a trial (pure; docs/reliability.md).

Field checks raise ValueError (pydantic turns it into one line naming the file and field);
the checks `tuner run` applies before it starts anything raise UserError.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
import string
from typing import TYPE_CHECKING, Any

from tuner.errors import UserError

if TYPE_CHECKING:
    from tuner.config import StudySpec

POSIX_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
API_KEY_ENV = "VLLM_API_KEY"  # vLLM's own; the tuner sets it from `engine.api_key_env`
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


def check_finite(value: float, what: str) -> None:
    if not math.isfinite(value):
        raise ValueError(f"{what} must be a finite number, not {value!r}")


def find_nul(data: Any) -> str | None:
    """The dotted path of the first string holding a NUL character (which no argv or env
    entry can carry), or None. Iterative, and each container once (YAML aliases share)."""
    stack: list[tuple[str, Any]] = [("", data)]
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


def check_run_storage(url: str) -> None:
    """`tuner run` refuses a storage that keeps nothing once the process exits."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        return  # Store reports a URL that is not one
    if not parsed.drivername.startswith("sqlite"):
        return
    db = parsed.database or ""
    if db in ("", ":memory:") or db.startswith("file::memory:") or "mode=memory" in url:
        raise UserError(
            f"--storage {url}: an in-memory database keeps no result after the run; "
            "give a file, e.g. sqlite:///tuner.db"
        )


def check_run(spec: StudySpec, storage: str | None) -> None:
    """Everything `tuner run` refuses before it touches the database or starts an engine;
    `storage` is `--storage` (None: the study file's, else $TUNER_STORAGE, else the default)."""
    from tuner.store import resolve_storage

    check_run_storage(resolve_storage(storage or spec.storage))
    check_run_environment(spec)


def check_run_environment(spec: StudySpec) -> None:
    """What `tuner run` needs from the environment and the model that loading cannot check
    (readers of the study file, `tuner trials`/`best`/`report`, do not need them)."""
    name = spec.engine.api_key_env
    if name is not None and not os.environ.get(name):
        raise UserError(
            f"engine.api_key_env: the environment variable {name} is not set (or is empty): "
            "the engine would run without the key"
        )
    if name is None and os.environ.get(API_KEY_ENV):
        raise UserError(
            f"{API_KEY_ENV} is set in the environment: the engine would require it and the "
            f"tuner would not send it; set engine.api_key_env: {API_KEY_ENV}, or unset it"
        )
    check_lengths_fit(spec)


def check_lengths_fit(spec: StudySpec) -> None:
    """Random prompts longer than the model's known length: every request would fail."""
    from tuner.space import max_model_len

    w = spec.workload
    tuned = any(
        p.env is None and (p.flag or f"--{name}") == "--max-model-len"
        for name, p in spec.search_space.parameters.items()
    )
    if w.dataset_name != "random" or tuned:
        return
    try:
        limit = max_model_len(spec)
    except (OSError, ValueError, TypeError):
        return  # an unreadable config.json is the engine's to report
    longest = math.ceil(w.random_input_len * (1 + w.random_range_ratio)) + math.ceil(
        w.random_output_len * (1 + w.random_range_ratio)
    )
    if limit is not None and longest > limit:
        raise UserError(
            f"workload: random prompts of up to {longest} tokens (input + output) exceed the "
            f"model's max length {limit}: every request would fail"
        )

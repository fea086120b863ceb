"""vLLM's numeric flags: their values checked as numbers when the study file is read, and
written the way vLLM's parser reads them (pure; ValueError `why`, which the sections turn
into one line naming the field).

A value the tuner computes with (the deployment shape, the scheduler rules, the memory
precheck) or hands to `vllm serve` must be a number of the flag's kind: `tensor-parallel-size:
0`, a choice `"two"` or `max-num-seqs: "abc"` would otherwise pass the load and fail later as
a traceback (ZeroDivisionError, ValueError), on every resume. An integral flag written as a
float (`4.0`) is an int: vLLM's argparse `type=int` refuses "4.0", so the exported command
must say `4`. Types and human-readable sizes as in vLLM's `EngineArgs.add_cli_args`
(vllm/engine/arg_utils.py: `human_readable_int`, `human_readable_int_or_auto`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Protocol, Self, TypedDict, TypeVar

from tuner.spec.values import Scalar

# flag → its least value (None: any): vLLM 0.32's EngineArgs fields of type int, and of type
# float below (vllm/engine/arg_utils.py); a flag not listed is passed as written
INT_FLAGS = {
    "tensor-parallel-size": 1,
    "pipeline-parallel-size": 1,
    "data-parallel-size": 1,
    "data-parallel-size-local": 1,
    "max-num-seqs": 1,
    "max-num-batched-tokens": 1,
    "max-num-scheduled-tokens": 1,
    "max-model-len": 1,
    "block-size": 1,
    "long-prefill-token-threshold": 0,
    "num-gpu-blocks-override": 1,
    "kv-cache-memory-bytes": 1,
    "max-parallel-loading-workers": 1,
    "max-cudagraph-capture-size": 1,
    "stream-interval": 1,
    "seed": None,
    "max-logprobs": None,
}
FLOAT_FLAGS = {"gpu-memory-utilization": 0.0, "cpu-offload-gb": None}
# flag → its greatest value: `CacheConfig.gpu_memory_utilization` is checked in (0, 1]
# (vllm/config/cache.py), so a range reaching past 1 would draw configs that never start
MOST = {"gpu-memory-utilization": 1.0}
# vLLM parses these with `human_readable_int` (1k = 1000, 1K = 1024, 25.6k = 25600)
HUMAN_READABLE = frozenset(
    {"max-num-batched-tokens", "max-num-scheduled-tokens", "kv-cache-memory-bytes", "max-model-len"}
)
# vLLM 0.32's on/off flags among those a study tunes or sets (`EngineArgs.add_cli_args`,
# vllm/engine/arg_utils.py: bool fields get `argparse.BooleanOptionalAction`, so `--name` or
# `--no-name` and never a value): "true" after one is read as a second positional argument
BOOL_FLAGS = frozenset(
    {
        "enable-chunked-prefill",
        "enable-prefix-caching",
        "enforce-eager",
        "async-scheduling",
        "disable-custom-all-reduce",
        "disable-sliding-window",
        "disable-cascade-attn",
        "enable-expert-parallel",
        "trust-remote-code",
    }
)
AUTO_MAX_MODEL_LEN = -1  # `--max-model-len -1` or `auto`: the longest that fits (vLLM's own)
_SIZE = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}

V = TypeVar("V")


class Parameter(Protocol):
    """A search-space parameter as read here (`tuner.spec.sections.ParameterSpec`, which
    imports this module to check its values)."""

    @property
    def type(self) -> str: ...
    @property
    def low(self) -> float | None: ...
    @property
    def high(self) -> float | None: ...
    @property
    def choices(self) -> Sequence[Scalar] | None: ...
    @property
    def flag(self) -> str | None: ...
    @property
    def env(self) -> str | None: ...
    @property
    def default(self) -> Scalar | None: ...
    def model_copy(self, *, update: Mapping[str, object] | None = None) -> Self: ...


P = TypeVar("P", bound=Parameter)


class _Written(TypedDict, total=False):
    """A categorical numeric parameter's choices and default, as vLLM reads them."""

    choices: list[Scalar]
    default: Scalar | None


def is_numeric(flag: str) -> bool:
    return flag in INT_FLAGS or flag in FLOAT_FLAGS


def flag_value(flag: str, value: V) -> V | int | float:
    """`value` as vLLM reads it for a numeric `flag` (an int flag's `4.0` is 4, a size's
    "32k" 32000); ValueError when it is not a number of the flag's kind, or below its least
    value. Other flags' values, and None (the flag left out), are returned as they are."""
    if flag in BOOL_FLAGS and value is not None and not isinstance(value, bool):
        raise ValueError(f"--{flag} is on or off: write true or false, unquoted, not {value!r}")
    if value is None or not is_numeric(flag):
        return value
    number = _number(flag, value)
    if flag == "max-model-len" and number == AUTO_MAX_MODEL_LEN:
        return number
    least = INT_FLAGS[flag] if flag in INT_FLAGS else FLOAT_FLAGS[flag]
    if least is not None and (number < least or (flag in FLOAT_FLAGS and number <= least)):
        bound = f"at least {least}" if flag in INT_FLAGS else f"more than {least:g}"
        raise ValueError(f"--{flag} takes {bound}, not {value!r}")
    if flag in MOST and number > MOST[flag]:
        raise ValueError(f"--{flag} takes at most {MOST[flag]:g}, not {value!r}")
    return number


def _number(flag: str, value: object) -> int | float:
    kind = "a whole number" if flag in INT_FLAGS else "a number"
    if isinstance(value, str):
        value = _parse(flag, value.strip())
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"--{flag} takes {kind}, not {value!r}")
    if flag in FLOAT_FLAGS:
        return value
    if not float(value).is_integer():
        raise ValueError(f"--{flag} takes {kind}, not {value!r}")
    return int(value)


def _parse(flag: str, text: str) -> int | float | str:
    """A number written as text: "8", "0.9", and for vLLM's human-readable sizes "32k"."""
    if flag == "max-model-len" and text.lower() == "auto":
        return AUTO_MAX_MODEL_LEN
    m = _SIZE.fullmatch(text) if flag in HUMAN_READABLE else None
    if m is not None:
        number, suffix = m.groups()
        if suffix in _DECIMAL:
            return int(float(number) * _DECIMAL[suffix])
        if "." in number:  # vLLM refuses a fraction of a binary multiple
            return text
        return int(number) * _BINARY[suffix]
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def as_written(flag: str, value: V) -> V | int | float:
    """A stored trial's value for `flag`, as vLLM reads it (an old study's `2.0` choice
    exports as 2); a value that is not one stays as it was stored."""
    try:
        return flag_value(flag, value)
    except ValueError:
        return value


def long_flag(name: str, p: Parameter) -> str:
    """The long flag a parameter (`name`, its `ParameterSpec`) sets, without dashes; "" for an
    env var."""
    return "" if p.env is not None else (p.flag or f"--{name}")[2:]


def numeric_parameter(name: str, p: P) -> P:
    """Search-space parameter `name` (a `ParameterSpec` on `flag`), its choices and default
    written as vLLM reads them; ValueError naming it: a bool parameter, a float range on an
    int flag, a bound, choice or default that is no number of the flag's kind, choices that
    repeat once written so."""
    flag = long_flag(name, p)
    try:
        update = _parameter_values(flag, p)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None
    choices = update.get("choices")
    if choices is not None and len(set(choices)) != len(choices):
        raise ValueError(f"{name}: choices {p.choices} repeat a value as vLLM reads them")
    return p.model_copy(update=update) if update else p


def _parameter_values(flag: str, p: Parameter) -> _Written:
    if flag in BOOL_FLAGS and not (
        p.type == "bool"
        or (p.type == "categorical" and all(isinstance(c, bool) for c in p.choices or []))
    ):
        raise ValueError(
            f"--{flag} is on or off (--{flag} / --no-{flag}): give the parameter type bool"
        )
    if not is_numeric(flag):
        return {}
    if p.type == "bool":
        raise ValueError(f"--{flag} takes a number: a bool parameter would pass true or false")
    if p.type == "float" and flag in INT_FLAGS:
        raise ValueError(
            f"--{flag} takes a whole number: give the parameter type int or categorical"
        )
    if p.type in ("int", "float"):
        for value in (p.low, p.high):
            flag_value(flag, value)
        return {}
    choices = [flag_value(flag, c) for c in p.choices or []]
    return {"choices": choices, "default": flag_value(flag, p.default)}

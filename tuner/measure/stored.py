"""How a stored payload is read: the lenient rule, stated once.

Every structured value a trial or study stores (`payloads`, `smallest`) is a frozen pydantic
dataclass deriving from `Stored`: `encode()` gives the JSON that is written, `decode(raw)`
reads it back. What a database holds may be older, hand-edited
or cut short, so reading is lenient, by these rules only:

- a stored figure is a finite real number, not a bool or a string (`is_finite`; `Finite` is
  the same rule in pydantic's terms); a `Figure` that is not one reads as None;
- a field that is missing or does not read reads as its default; an entry of a stored mapping
  or an item of a stored list that does not read is left out (`Lenient`, `Figures`);
- a value that is not the payload's shape at all (not a mapping, or without a field that has
  no default) decodes to None.

The same types check a payload built in code (pydantic validates on construction), except
that there a field of the wrong type raises instead of reading as its default: what a
payload holds is what a reader reads back.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Annotated, ClassVar, Self, TypeGuard, TypeVar

from pydantic import (
    AllowInfNan,
    ModelWrapValidatorHandler,
    PlainValidator,
    Strict,
    TypeAdapter,
    ValidationError,
    WrapValidator,
    model_validator,
)
from pydantic.dataclasses import dataclass
from pydantic_core import SchemaValidator

_T = TypeVar("_T")


def is_finite(value: object) -> TypeGuard[float]:
    """A real number (not a bool) that is finite: what a stored figure must be."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _drop_unreadable(value: object, read: Callable[[object], _T]) -> _T:
    """A stored mapping or list less the fields, entries or items that do not read."""
    try:
        return read(value)
    except ValidationError as exc:
        bad = {e["loc"][0] for e in exc.errors() if e["loc"]}
        if isinstance(value, Mapping):
            return read({k: v for k, v in value.items() if k not in bad})
        if isinstance(value, list):
            return read([v for i, v in enumerate(value) if i not in bad])
        raise


def _or_none(value: object, read: Callable[[object], _T]) -> _T | None:
    try:
        return read(value)
    except ValidationError:
        return None


def _as_dict(value: object) -> dict[object, object]:
    if not isinstance(value, Mapping):
        raise ValueError("not a mapping")
    return dict(value)


Lenient = WrapValidator(_drop_unreadable)
Finite = Annotated[float, Strict(), AllowInfNan(False)]  # `is_finite`, in pydantic's terms
Figure = Annotated[Finite | None, WrapValidator(_or_none)]  # a finite figure, else None
Figures = Annotated[dict[str, Finite], Lenient]  # {name: figure}, the finite ones
Interval = tuple[Finite, Finite]  # a 95 % bootstrap interval, [low, high]
# A stored mapping kept as it was written (a count stays an int, nothing is dropped)
AsWritten = Annotated[dict[str, _T], PlainValidator(_as_dict)]


@dataclass(frozen=True)
class Stored:
    """A stored payload: `encode()` writes every field (a nested payload, a tuple as a list)
    but those `OMITTED` when they hold the value given there; `decode` reads leniently."""

    OMITTED: ClassVar[Mapping[str, object]] = {}
    __pydantic_validator__: ClassVar[SchemaValidator]  # set by pydantic

    @model_validator(mode="wrap")
    @classmethod
    def _lenient(cls, value: object, handler: ModelWrapValidatorHandler[Self]) -> Self:
        """Decoding (a mapping): a field that does not read reads as its default."""
        return _drop_unreadable(value, handler) if isinstance(value, Mapping) else handler(value)

    def encode(self) -> dict[str, object]:
        out = {f.name: _json(getattr(self, f.name)) for f in fields(self)}
        return {k: v for k, v in out.items() if k not in self.OMITTED or v != self.OMITTED[k]}

    @classmethod
    def decode(cls, raw: object) -> Self | None:
        """The payload a stored value reads as; None: not this payload's shape at all."""
        read = cls.__pydantic_validator__.validate_python
        found: Self | None = _or_none(raw, read) if isinstance(raw, Mapping) else None
        return found

    @classmethod
    def decode_list(cls, raw: object) -> tuple[Self, ...]:
        """A stored list of payloads: the ones that read, in order."""
        found = [cls.decode(x) for x in raw] if isinstance(raw, list) else []
        return tuple(x for x in found if x is not None)

    @classmethod
    def decode_map(cls, raw: object) -> dict[str, Self]:
        """A stored {name: payload} mapping: the entries that read."""
        found = {str(k): cls.decode(v) for k, v in raw.items()} if isinstance(raw, Mapping) else {}
        return {k: v for k, v in found.items() if v is not None}


_INTERVAL = TypeAdapter(Interval)


def read_interval(raw: object) -> tuple[float, float] | None:
    """A stored [low, high] interval of two finite figures, else None."""
    return _or_none(raw, _INTERVAL.validate_python)


def _json(value: object) -> object:
    if isinstance(value, Stored):
        return value.encode()
    if isinstance(value, tuple | list):
        return [_json(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _json(v) for k, v in value.items()}
    return value

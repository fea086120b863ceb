"""The study file's mapping as `tuner init` drafts it (`tuner.scaffold.study`), section by
section in the order it is written; the sections `init` fills freely stay JSON objects."""

from __future__ import annotations

from typing import TypedDict

from tuner.spec.values import Scalar


class EngineDraft(TypedDict, total=False):
    """The study file's `engine:` section as `tuner init` writes it."""

    command: list[str]
    model: str
    production_model: str
    startup_timeout_s: int
    flags: dict[str, Scalar]
    export_drop_flags: list[str]


class StudyDraft(TypedDict):
    """The study file's mapping as `tuner init` writes it, in its order."""

    name: str
    description: str
    engine: EngineDraft
    hardware: dict[str, object]
    search_space: str | dict[str, object]  # a path, or the space itself (its baseline moved)
    workload: dict[str, object]
    objective: dict[str, object]
    budget: dict[str, object]
    sampler: dict[str, object]
    trial: dict[str, object]

"""Whether the simulator knows a study's model: a profile, or an unknown model.

A model the simulator cannot read (a hub id not in the local cache, another engine's own
name, a config.json of a shape it does not model) stops nothing on a real engine: the
estimates that need its shape (the memory precheck, the night's cost, prediction skips, the
multi-fidelity screen, the start-up estimate) are unknown, said once (`unknown_model_note`),
and the engine decides. Only the simulated engine and `tuner plan`, which are the simulator,
refuse it (`load_model`'s one line).
"""

from __future__ import annotations

from pathlib import Path

from tuner.errors import UserError
from tuner.sim.profiles import ModelProfile, load_model


def known_model(model: str | Path) -> ModelProfile | None:
    """The simulator's profile of `model` (`load_model`), None when it has none."""
    try:
        return load_model(model)
    except UserError:
        return None


def unknown_model_note(model: str) -> str | None:
    """The one line that says the estimates are unknown, or None when the model is known."""
    try:
        load_model(model)
    except UserError as exc:
        return (
            f"engine.model: unknown to the simulator ({exc}): no memory precheck, night's "
            "cost, prediction skips or screen for this study; the engine decides"
        )
    return None

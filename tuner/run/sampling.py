"""The study file's sampler, checked before anything starts, and the public-API suggestion of a
trial's parameters."""

from __future__ import annotations

import importlib.util

import optuna

from tuner.errors import UserError
from tuner.spec.study import StudySpec
from tuner.spec.values import Scalar


def make_sampler(spec: StudySpec, offset: int = 0) -> optuna.samplers.BaseSampler:
    """The study file's sampler. Optuna 5's samplers read trial constraints themselves, so
    infeasible and refused configs steer the search away instead of being forgotten.

    A seeded sampler is seeded with seed + `offset`, the number of trials already stored: a
    new study is reproducible, and a resumed one does not replay its first proposals."""
    name = spec.sampler.name
    seed = None if spec.sampler.seed is None else (spec.sampler.seed + offset) % 2**32
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed, deterministic_objective=False)
    return optuna.samplers.TPESampler(seed=seed)


# What each sampler needs beyond the tuner's own dependencies (Optuna imports them lazily,
# so without this check GPSampler fails at its first non-random trial, hours into a night).
SAMPLER_MODULES = {"gp": ("torch", "scipy")}


def check_sampler(spec: StudySpec) -> None:
    """Refuse, before anything starts, a sampler whose optional dependencies are missing."""
    missing = [
        m for m in SAMPLER_MODULES.get(spec.sampler.name, ()) if importlib.util.find_spec(m) is None
    ]
    if missing:
        raise UserError(
            f"sampler.name: {spec.sampler.name!r} needs {' and '.join(missing)}, which are not "
            "installed: pip install 'tuner[gp]' (or choose tpe, random or nsga2)"
        )


def suggest(trial: optuna.Trial, name: str, d: optuna.distributions.BaseDistribution) -> Scalar:
    """`study.ask(distributions)`'s suggestion, through the public suggest API."""
    D = optuna.distributions
    if isinstance(d, D.IntDistribution):
        return trial.suggest_int(name, d.low, d.high, step=d.step, log=d.log)
    if isinstance(d, D.FloatDistribution):
        return trial.suggest_float(name, d.low, d.high, step=d.step, log=d.log)
    if isinstance(d, D.CategoricalDistribution):
        choice = trial.suggest_categorical(name, d.choices)
        if choice is None:  # never: a study file's choices are scalars (`ParameterSpec`)
            raise TypeError(f"{name}: a categorical parameter chose None")
        return choice
    raise TypeError(f"unsupported distribution {d!r}")

"""Flag names the engine does not accept, found before the night (docs/preflight.md).

The three sources, vLLM's parser (`tuner.engine.vllm_flags`), the simulated engine's flags
(`tuner.sim.flags`), else the vLLM flags the simulator knows, and when each applies: that page's
list. With the last, a near miss (`max-num-seq`) is a typo, and any other name only a note that
it could not be checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tuner.engine.vllm_flags import VllmFlags, engine_python, is_simulated_engine, vllm_flags
from tuner.sim.flags import SIM_FLAGS, VLLM_FLAGS, models
from tuner.spec.parts import Serving
from tuner.spec.suggest import closest

TYPO_CUTOFF = 0.85  # a name this close to a known one is a typo of it (difflib's ratio)


@dataclass
class FlagCheck:
    """What the check found: problems (each one line), notes, and what it checked against."""

    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    against: str = ""


def study_flags(spec: Serving) -> list[tuple[str, str, bool]]:
    """(where in the study file, flag name without dashes, may be False) of every flag the
    engine is given: the fixed ones and the tuned ones (env vars are not flags)."""
    out = [(f"engine.flags.{k}", k, v is False) for k, v in spec.engine.flags.items()]
    for name, p in spec.search_space.parameters.items():
        if p.env is None:
            flag = (p.flag or f"--{name}").removeprefix("--")
            negated = p.type == "bool" or False in (p.choices or [])
            out.append((f"search_space.{name}", flag, negated))
    if spec.search_space.fill_data_parallel:  # derived, but on the command line all the same
        out.append(("search_space.fill_data_parallel", "data-parallel-size", False))
    return out


def check_flags(spec: Serving, *, probe: bool = True) -> FlagCheck:
    """The study's flag names against what its engine accepts. `probe`: ask the engine's
    vLLM (seconds to a minute); without it a real engine's names are checked only for typos."""
    command, model = spec.engine.command, spec.engine.model
    if is_simulated_engine(command):
        return _against(spec, SIM_FLAGS, "the simulated engine's flags in tuner/sim/flags.py")
    python = engine_python(command, model) if probe else None
    if python is not None:
        found = vllm_flags(python)
        if isinstance(found, VllmFlags):
            return _against_vllm(spec, found)
        result = _typos(spec, f"engine python {python} cannot import vLLM")
        line = f"engine.command: {python} cannot build vLLM's argument parser: {found}"
        if _names_vllm(command):  # the engine is vLLM itself: it would not start either
            result.problems.insert(0, line)
        else:  # a wrapper of the user's (`python launch.py`): its flags may not be vLLM's
            result.notes.insert(0, line)
        return result
    why = (
        "vLLM's parser was not asked (--no-preflight)"
        if probe is False
        else ("no python of the engine command imports vLLM here")
    )
    return _typos(spec, why)


def _names_vllm(command: list[str]) -> bool:
    """The command runs vLLM itself: the `vllm` script, or `python -m vllm...`."""
    return any(Path(part).name == "vllm" or part.startswith("vllm.") for part in command[:4])


def _against(spec: Serving, accepted: frozenset[str], against: str) -> FlagCheck:
    result = FlagCheck(against=against)
    for where, name, _ in study_flags(spec):
        if name not in accepted:
            result.problems.append(_unknown(where, name, accepted, against))
    return result


def _against_vllm(spec: Serving, vllm: VllmFlags) -> FlagCheck:
    """vLLM's FlexibleArgumentParser takes `_` for `-`; a bool's False is `--no-NAME`."""
    against = f"vLLM {vllm.version}'s argument parser ({vllm.python})"
    result = FlagCheck(against=against)
    for where, name, negated in study_flags(spec):
        dashed = name.replace("_", "-")
        if dashed not in vllm.names:
            result.problems.append(_unknown(where, name, vllm.names, against))
        elif negated and f"no-{dashed}" not in vllm.names:
            result.problems.append(
                f"{where}: vLLM {vllm.version} has --{dashed} but no --no-{dashed}: false "
                "cannot be passed (leave the flag out instead)"
            )
    return result


def _typos(spec: Serving, why: str) -> FlagCheck:
    against = f"the vLLM flags the simulator knows ({why})"
    result = FlagCheck(against=against)
    for where, name, _ in study_flags(spec):
        dashed = name.replace("_", "-")
        if dashed in VLLM_FLAGS:
            continue
        if closest(dashed, VLLM_FLAGS, TYPO_CUTOFF) is not None:
            result.problems.append(_unknown(where, name, VLLM_FLAGS, against))
        else:
            result.notes.append(f"{where}: --{name} not checked ({why})")
    return result


def _unknown(where: str, name: str, accepted: frozenset[str], against: str) -> str:
    near = closest(name.replace("_", "-"), accepted)
    hint = f": did you mean --{near}?" if near else ""
    return f"{where}: the engine does not accept --{name}{hint} (checked against {against})"


def unmodelled(spec: Serving) -> list[str]:
    """Tuned flags the simulator does not model: `tuner plan` predicts the same figures for
    every value of them."""
    return [
        f"{where}: the simulator does not model --{name}: `tuner plan` predicts the same "
        "figures for every value of it"
        for where, name, _ in study_flags(spec)
        if where.startswith("search_space.") and not models(name)
    ]

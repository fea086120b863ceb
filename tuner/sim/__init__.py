"""The simulated engine: a discrete-event model of vLLM V1's scheduler, with drivers around it.

flags + model profile + accelerator profile → memory plan and vLLM's start-up refusals →
scheduler steps timed by a roofline cost model → per-request token times (`RequestRecord`s).
Every figure it produces is a prediction, labelled SIMULATED, never a measurement.

Modules of the core (plain computation: no HTTP, no asyncio, no CLI, no study file; an
import-linter contract holds it):
- `profiles`: model shapes and accelerator datasheets (`load_model`, `get_gpu`), and
  whether the simulator knows a study's model (`known_model`);
- `profile_file`: accelerator profiles as YAML files (`load_gpu`);
- `memory`: flag defaults, the memory plan, vLLM's refusals (`check_config`);
- `scheduler`: V1's rules (token budget, max-num-seqs, paged blocks, preemption);
- `steptime`: the step-time model (roofline + all-reduce + overhead);
- `engine`: scheduler + step times + a clock;
- `replicas`: data-parallel replicas (one engine each) behind vLLM's DP load balancer;
- `planner`: the virtual-time driver (`simulate`), what `tuner plan` and the screen call;
- `frontend`: vLLM's API server in front of the engine, one thread that admits requests and
  writes every stream's tokens (`ApiThread`), for the planner and the server alike;
- `fit`: fitting a profile's constants to measured trials (`tuner calibrate`, the screen);
- `text`, `faults`, `openai_shapes`: token text for the server, injected faults, the
  OpenAI response objects it writes;
- `fit_problem`: the least-squares problem behind `fit` (factors, predictions, residuals);
- `prefix_cache`: vLLM V1's automatic prefix caching, block by block;
- `vllm_defaults`: vLLM's own defaults for the flags the tuner searches;
- `flags`: the flags `tuner sim serve` accepts, the one list of them.

Beside it: `boot`, a GPU engine's start-up phases as the simulated engine logs them (and
`tuner plan`'s estimate of a real start);
`measured`, a profile measured on this machine by `microbench_torch` (a script run with
PyTorch in vLLM's environment, never importing the tuner).

Around it: `server`, the OpenAI-compatible HTTP server of `tuner sim serve` (aiohttp),
`startup`, that command's start as vLLM's (its model, accelerator and flags read, config checks,
simulated load, log lines, the port),
and `server_info`, what that server says about its own config in vLLM's shapes.

What may be assumed: deterministic (same inputs, same figures); the core takes plain values
(flags, profiles, prompt and output lengths, arrival times), never a `StudySpec`.

Re-exported here, on first use: the core's everyday names (numpy only), so that importing a
light module (`tuner.sim.profiles`, whose model and GPU names the CLI's help lists) does not
import numpy. Not `server` (aiohttp must stay out of the core's path), nor `fit` (scipy) or
`profile_file` (pydantic): import them from their modules.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tuner.sim.engine import Engine
    from tuner.sim.memory import check_config
    from tuner.sim.planner import SimResult, simulate
    from tuner.sim.profiles import GpuProfile, ModelProfile, get_gpu, load_model

_HOME = {
    "Engine": "tuner.sim.engine",
    "check_config": "tuner.sim.memory",
    "SimResult": "tuner.sim.planner",
    "simulate": "tuner.sim.planner",
    "GpuProfile": "tuner.sim.profiles",
    "ModelProfile": "tuner.sim.profiles",
    "get_gpu": "tuner.sim.profiles",
    "load_model": "tuner.sim.profiles",
}


def __getattr__(name: str) -> object:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'tuner.sim' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


__all__ = [
    "Engine",
    "GpuProfile",
    "ModelProfile",
    "SimResult",
    "check_config",
    "get_gpu",
    "load_model",
    "simulate",
]

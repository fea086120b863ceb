"""A stored config that vLLM refuses on the study's platform is never handed out as a command.

A study measured before a rule was known (the simulated engine took `--block-size 8` on a CUDA
GPU until it followed vLLM 0.32's attention backends, `tuner.spec.vllm_rules`) may hold such a
trial as its best; `tuner best` and `tuner export` refuse it with vLLM's message.
"""

from __future__ import annotations

from tuner.errors import UserError
from tuner.runners.plan import study_platform
from tuner.sim.vllm_defaults import VLLM_VERSION
from tuner.spec.space import check_rules, effective_flags, max_model_len
from tuner.spec.study import StudySpec
from tuner.spec.values import Params


def check_deployable(spec: StudySpec, number: int, params: Params) -> None:
    """UserError when vLLM refuses trial `number`'s flags on the study's platform."""
    platform = study_platform(spec)
    refused = check_rules(effective_flags(spec, params), max_model_len(spec), platform)
    if refused is not None:
        raise UserError(
            f"trial {number}'s config would not start on vLLM {VLLM_VERSION} ({platform}): "
            f"{refused} Export another trial (--trial N), or run the study again"
        )

"""The workload's requests as values: one request (`BenchRequest`) and the requests a runner
measures (`Workload`), frozen, built once (`tuner.workload.datasets`) and passed in.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

# Chat messages, as transformers' `apply_chat_template` types a conversation: a file's
# messages are checked to have a string `role` and `content` (`tuner.workload.datasets`'
# `_is_chat`)
ChatMessages = list[dict[str, str]]


@dataclass(frozen=True, slots=True)
class BenchRequest:
    """One request of the workload: a prompt (text, or chat messages), its length in tokens,
    the output length to ask for (`max_tokens`; None leaves it to the server)."""

    prompt: str | ChatMessages
    prompt_len: int
    output_len: int | None
    ignore_eos: bool = False
    # Kept only where prompts share prefixes on purpose (documents asked several times), for
    # the simulator's prefix cache (`tuner plan`); None: nothing shared worth modelling.
    prompt_ids: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Workload:
    """The requests a runner measures, handed to it when it is made and never swapped: the
    single workload's (`requests`) and each scenario's by name. A perturbed, scenario or
    length-only variant is a new value; what it leaves out (None, a name absent) the runner
    builds from its spec, once."""

    requests: tuple[BenchRequest, ...] | None = None
    scenarios: Mapping[str, tuple[BenchRequest, ...]] = dataclasses.field(default_factory=dict)

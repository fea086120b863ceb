"""The `max-model-len` `tuner init` writes: what the traffic needs, not the model's whole
context. Why (vLLM's refusal of chunked prefill off below it, and how many configs that cost)
and the value each traffic gets: docs/study-file.md, "max-model-len from the traffic".

The rule, by name: the traffic's longest request, plus `ROOM`, rounded up to a multiple of
`ROUND_TO` (itself a multiple of each block size vLLM takes).
"""

from __future__ import annotations

import math

from tuner.spec.flag_values import long_flag
from tuner.spec.parts import Measuring

ROOM = 0.05  # 5 % over the longest request: special tokens, a prompt re-tokenized longer
ROUND_TO = 256  # a multiple of every block size (8 … 256): whole KV blocks


def model_len_for(longest: int, model_max: int) -> int | None:
    """The `max-model-len` for requests of at most `longest` tokens (prompt plus output);
    None when that is the model's own `model_max` or more (leave vLLM's default)."""
    wanted = math.ceil(math.ceil(longest * (1 + ROOM)) / ROUND_TO) * ROUND_TO
    return wanted if wanted < model_max else None


def traffic_model_len(spec: Measuring, model_max: int) -> tuple[int | None, str]:
    """`max-model-len` for the study's traffic, and why, in words (None: not set)."""
    if any(long_flag(n, p) == "max-model-len" for n, p in spec.search_space.parameters.items()):
        return None, "max-model-len: searched by the space, not set"
    if "max-model-len" in spec.engine.flags:
        return None, f"max-model-len {spec.engine.flags['max-model-len']}: as the flags give it"
    need = _longest(spec)
    if need is None:
        return None, (
            f"max-model-len: the model's {model_max} (a request of the traffic's file leaves "
            "its output length to the server, so the longest request is unknown: give each "
            "an output_len, or set engine.flags max-model-len, to allow more configs with "
            "chunked prefill off)"
        )
    value = model_len_for(need, model_max)
    if value is None:
        return None, f"max-model-len: the model's {model_max} (the longest request is {need})"
    return value, (
        f"max-model-len {value}: the longest request ({need} tokens, prompt and output) with "
        f"{ROOM:.0%} room, in whole {ROUND_TO}-token blocks; the model takes {model_max}, and "
        "vLLM refuses chunked prefill off below max-model-len batched tokens"
    )


def _longest(spec: Measuring) -> int | None:
    """Prompt plus output tokens of the traffic's longest request: from the spec (random,
    longdoc), else read from the file as a trial reads it (its tokenizer, its chat template);
    None when a request of a file leaves its output length to the server (it may run to
    max-model-len)."""
    found = []
    for work in [spec.workload, *spec.workloads.values()]:
        if work.longest_request is not None:
            found.append(work.longest_request)
            continue
        from tuner.runners.trial_runner import workload_tokenizer
        from tuner.workload.datasets import build_requests

        requests = build_requests(work, workload_tokenizer(spec))
        if not requests or any(r.output_len is None for r in requests):
            return None
        found.append(max(r.prompt_len + (r.output_len or 0) for r in requests))
    return max(found)

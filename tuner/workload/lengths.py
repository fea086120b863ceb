"""The token lengths of a workload's requests without its tokenizer: what the simulator needs,
and the one refusal of requests longer than the server's max-model-len.

`build_requests` makes the prompts' text with the study's tokenizer; the simulator reads only
their lengths. For the built-in datasets (random, longdoc) the lengths are drawn from the seed
exactly as `build_requests` draws them, less the tokenizer's special tokens (a few tokens per
prompt), so the night's cost is estimated before the tokenizer is there (`tuner check`).
"""

from __future__ import annotations

import math

import numpy as np

from tuner.errors import UserError
from tuner.spec.workload import WorkloadSpec
from tuner.workload.request import BenchRequest


def length_only_requests(w: WorkloadSpec, *, reuse: bool = True) -> list[BenchRequest] | None:
    """The requests' lengths with empty prompts; None for a dataset file (its lengths are its
    texts', which need the tokenizer) and, with `reuse`, for long documents that share
    prefixes (asked several times, a system prompt: the simulator's prefix cache reads the
    prompts' tokens, so empty prompts would run another workload than `tuner plan`'s).
    `reuse=False`: those too, each request its own document (no prefix hits: an estimate
    that errs long, for a cost made without the tokenizer)."""
    rng = np.random.default_rng(w.seed)
    n = w.num_prompts
    if w.dataset_name == "random":
        r = w.random_range_ratio
        in_low = max(math.floor(w.random_input_len * (1 - r)), 1)
        in_high = max(math.ceil(w.random_input_len * (1 + r)), in_low)
        out_low = max(math.floor(w.random_output_len * (1 - r)), 1)
        out_high = max(math.ceil(w.random_output_len * (1 + r)), 1)
        inputs = rng.integers(in_low, in_high + 1, size=n)
        outputs = rng.integers(out_low, out_high + 1, size=n)
        pairs = zip(inputs, outputs, strict=True)
        return [BenchRequest("", int(i), int(o), ignore_eos=True) for i, o in pairs]
    if w.dataset_name == "longdoc" and not (reuse and w.longdoc_shared):
        lengths, weights = w.longdoc_lengths, w.longdoc_weights
        p = None if weights is None else np.asarray(weights, float) / float(sum(weights))
        picks = rng.choice(len(lengths), size=n, p=p)
        out = w.longdoc_output_len
        return [BenchRequest("", int(lengths[int(k)]), out, ignore_eos=True) for k in picks]
    return None


def check_longest_fits(w: WorkloadSpec, limit: int, where: str) -> None:
    """The one refusal of a workload whose longest request exceeds max-model-len `limit`."""
    longest = w.longest_request
    if longest is None or longest <= limit:
        return
    if w.dataset_name == "longdoc" and not w.longdoc_shared:
        raise UserError(
            f"{where}a long document of {max(w.longdoc_lengths)} tokens plus "
            f"{w.longdoc_output_len} output tokens exceeds max-model-len {limit}: documents "
            f"may have at most {limit - w.longdoc_output_len} tokens"
        )
    raise UserError(
        f"{where}random prompts of up to {longest} tokens (input + output) exceed the "
        f"model's max length {limit}: every request would fail"
    )

"""Prompts of an exact token length: decode, re-encode, adjust (vLLM's RandomDataset way).

Shared by the random and long-document datasets; only where the extra tokens come from
differs (random ids for random prompts, more document words for documents).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from tuner.workload.tokenizer import HFTokenizer, decode

# Decode/re-encode rounds allowed to hit an exact prompt length (vLLM's max_retry).
MAX_RETRY = 10
FILLER = " the"  # a one-token word in every BPE vocabulary we met: the last-resort padding


def exact_length_prompt(
    tokenizer: HFTokenizer, ids: list[int], target: int, more_ids: Callable[[int], list[int]]
) -> tuple[str, list[int]]:
    """Decode, re-encode, extend with `more_ids(n)` or truncate, until `target` tokens (or
    retries run out: some token sequences do not survive a decode/encode round trip)."""
    retries = MAX_RETRY
    while True:
        prompt = decode(tokenizer, ids)
        ids = tokenizer.encode(prompt, add_special_tokens=False)
        if len(ids) == target:
            return prompt, ids
        if retries <= 0:
            return force_length(tokenizer, prompt, target)
        if len(ids) < target:
            ids.extend(more_ids(target - len(ids)))
        else:
            ids = ids[:target]
        retries -= 1


def force_length(tokenizer: HFTokenizer, prompt: str, target: int) -> tuple[str, list[int]]:
    """Where vLLM gives up (and sends a prompt a few tokens off), cut the text to the longest
    prefix within `target` tokens, then pad with a one-token word until exact."""
    encode = partial(tokenizer.encode, add_special_tokens=False)
    lo, hi = 0, len(prompt)
    while lo < hi:  # longest character prefix with at most `target` tokens
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if len(encode(prompt[:mid])) <= target else (lo, mid - 1)
    prompt = prompt[:lo]
    ids = encode(prompt)
    while len(ids) < target:
        padded = encode(prompt + FILLER)
        if len(padded) != len(ids) + 1:
            break
        prompt, ids = prompt + FILLER, padded
    return prompt, ids


def resized_prompt(tokenizer: HFTokenizer, prompt: str, factor: float) -> tuple[str, int, int]:
    """The prompt cut, or extended with its own tokens over again, to `factor` times its
    token length (exact, as the random dataset's prompts are): (text, old tokens, new)."""
    ids: list[int] = tokenizer.encode(prompt, add_special_tokens=False)
    if not ids or factor == 1.0:
        return prompt, len(ids), len(ids)
    target = max(1, round(len(ids) * factor))

    def cycled(n: int) -> list[int]:
        return (ids * (n // len(ids) + 1))[:n]

    text, out = exact_length_prompt(tokenizer, cycled(target), target, cycled)
    return text, len(ids), len(out)

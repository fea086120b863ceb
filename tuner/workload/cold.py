"""Every run measured cold: what keeps one run's prompts out of the next run's prefix cache, and
what a run's prefix-cache hit rate should be (docs/metrics.md, "Every run cold").

Why (vLLM keeps a finished request's cached prefix, so a run would read an earlier run's prompts
from the cache) and what it cost: that section. Two things keep runs apart:

- the warm-up requests (and the initial test request) send a prompt outside the measured set:
  the first measured prompt with its first character changed, so none of its blocks (whose names
  chain from the first block) is one a measured prompt can hit;
- after the warm-ups, `POST /reset_prefix_cache` (vLLM's dev-mode endpoint, offered under
  `VLLM_SERVER_DEV_MODE=1`, as `vllm bench sweep` uses it) empties the cache. An engine that
  does not offer it answers 404, and the run goes on: the measured hit rate then shows any
  reuse.

`implied_hit_rate` is what the workload itself shares (a long document asked several times), the
bound a measured hit rate is judged against (`tuner.measure.runs.PrefixCacheRun`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
from collections.abc import Sequence

import httpx

from tuner.workload.request import BenchRequest
from tuner.workload.tokenizer import HFTokenizer, chat_ids

RESET_PATH = "/reset_prefix_cache"
DEV_MODE_ENV = "VLLM_SERVER_DEV_MODE"
RESET_TRIES = 20  # vLLM refuses while a finished stream's blocks are still being freed
RESET_RETRY_S = 0.1
RESET_TIMEOUT_S = 5.0
# The smallest KV block vLLM's CUDA backends take: the most hits a prompt set can imply (a
# larger block only ever hits fewer tokens of the same shared prefix).
IMPLIED_BLOCK_TOKENS = 16


def is_loopback(host: str) -> bool:
    """A host only this machine reaches: there, the engine may offer vLLM's dev-mode
    endpoints (`VLLM_SERVER_DEV_MODE=1`: cache resets, but also sleep and RPCs), which a
    tuner's private engine needs and nobody else can call."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def warmup_request(first: BenchRequest) -> BenchRequest:
    """The first measured request with its prompt's first character changed: the same size
    and shape, but a first KV block (and so every block) no measured prompt shares."""
    prompt = first.prompt
    if isinstance(prompt, str):
        return dataclasses.replace(first, prompt=_other_start(prompt), prompt_ids=None)
    for i, message in enumerate(prompt):
        if isinstance(message.get("content"), str):
            changed = {**message, "content": _other_start(message["content"])}
            return dataclasses.replace(
                first, prompt=[*prompt[:i], changed, *prompt[i + 1 :]], prompt_ids=None
            )
    return first


def _other_start(text: str) -> str:
    mark = "~" if not text.startswith("~") else "#"
    return mark + text[1:] if text else mark


async def reset_prefix_cache(base_url: str, headers: dict[str, str]) -> bool:
    """Empty the engine's prefix cache (vLLM's dev-mode endpoint); False where the engine
    does not offer it or would not do it (best effort: never an error)."""
    url = base_url.rstrip("/") + RESET_PATH
    auth = {k: v for k, v in headers.items() if k.lower() == "authorization"}
    from tuner.tls import tls_context

    async with httpx.AsyncClient(trust_env=False, verify=tls_context()) as client:
        for _ in range(RESET_TRIES):
            try:
                resp = await client.post(url, headers=auth, timeout=RESET_TIMEOUT_S)
            except (httpx.HTTPError, OSError):
                return False
            if resp.status_code != 200:
                return False  # 404: not in dev mode (or not vLLM)
            try:
                if resp.json().get("success") is True:
                    return True
            except (ValueError, AttributeError):
                return False
            await asyncio.sleep(RESET_RETRY_S)
    return False


def implied_hit_rate(
    prompts: Sequence[Sequence[int]], block_tokens: int = IMPLIED_BLOCK_TOKENS
) -> float:
    """The share of prompt tokens an engine with an unbounded prefix cache, empty at the start,
    finds cached when the prompts arrive in this order: each full leading block that an
    earlier prompt also began with (the block and all before it) is a hit, and at least one
    token of a prompt is always computed, as in vLLM."""
    seen: set[tuple[int, ...]] = set()
    queried = hit = 0
    for ids in prompts:
        queried += len(ids)
        full = (len(ids) - 1) // block_tokens  # the last token is always computed
        hits = 0
        while hits < full and tuple(ids[: (hits + 1) * block_tokens]) in seen:
            hits += 1
        hit += hits * block_tokens
        for b in range(1, len(ids) // block_tokens + 1):
            seen.add(tuple(ids[: b * block_tokens]))
    return hit / queried if queried else 0.0


def prompt_ids(request: BenchRequest, tokenizer: HFTokenizer, chat: bool) -> list[int]:
    """The token ids the engine sees for one request: the prompt as the server tokenizes it
    (chat messages through the chat template, when the tokenizer has one)."""
    if request.prompt_ids is not None and not chat:
        return list(request.prompt_ids)
    prompt = request.prompt
    if chat:
        messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
        if getattr(tokenizer, "chat_template", None):
            return chat_ids(tokenizer, messages)
        prompt = "\n".join(str(m.get("content", "")) for m in messages)
    return list(tokenizer(prompt).input_ids)


def workload_hit_rate(
    requests: Sequence[BenchRequest], tokenizer: HFTokenizer, chat: bool
) -> float:
    """`implied_hit_rate` of a run's requests, in the order they are sent."""
    return implied_hit_rate([prompt_ids(r, tokenizer, chat) for r in requests])

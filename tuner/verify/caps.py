"""What `tuner verify` may send to a production engine (pure): the URL it may talk to, and the
study's workload cut down to the user's caps. The caps, their defaults and why each is safe:
docs/verify.md, "Safe against production".

What callers may assume: the caps hold for everything sent, the client's one initial test
request included (it counts toward `--max-requests`; no warm-ups); the measured requests keep
the study's Poisson arrivals, rescaled to average at most `--max-rate`; dispatch takes at most
half of `--max-time`, so the tail fits, and a run still going at `--max-time` is stopped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from urllib.parse import urlsplit

from tuner.errors import UserError
from tuner.spec.workload import WorkloadSpec
from tuner.workload.cold import is_loopback

INITIAL_TEST_REQUESTS = 1  # `run_benchmark` sends one before the measured run, as vLLM's


@dataclass(frozen=True)
class Caps:
    max_requests: int  # every request sent, the initial test request included
    max_rate: float | None  # req/s on average over the run; None: the study's (finite) rate
    max_time_s: float  # wall seconds of the whole run
    # the prompts' seed: a fresh one per run by default (`tuner verify --seed`), so that an
    # earlier verify's prompts, still in the engine's prefix cache, are not sent again
    seed: int | None = None


@dataclass(frozen=True)
class CappedWorkload:
    workload: WorkloadSpec
    notes: tuple[str, ...]  # what was cut, in words
    # fewer prompts or a lower rate than the study's: throughputs are not comparable (a
    # shorter run counts its tail's latency against fewer requests; a lower rate caps them)
    lighter: bool


def check_url(url: str, allow_host: str | None) -> str:
    """The engine's base URL, normalised; a URL that is not an engine's root on loopback, or
    on the host `--allow-host` names, is a UserError (verify never aims at a host by chance)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserError(f"--base-url {url!r}: give http://HOST:PORT (or https://)")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise UserError(f"--base-url {url!r}: give the engine's root, without credentials or ?")
    if parts.path not in ("", "/"):
        raise UserError(f"--base-url {url!r}: give the engine's root, not the path {parts.path}")
    host = parts.hostname
    if not is_loopback(host) and host != (allow_host or "").lower():
        raise UserError(
            f"--base-url {url!r} is not on this machine: verify sends load to it, so name the "
            f"host you mean with --allow-host {host}"
        )
    try:
        parts.port  # noqa: B018 (urlsplit checks the port when asked)
    except ValueError:
        raise UserError(f"--base-url {url!r}: bad port") from None
    return f"{parts.scheme}://{parts.netloc}"


def capped(study: WorkloadSpec, caps: Caps) -> CappedWorkload:
    """The study's workload within `caps`: fewer prompts, a lower rate, no warm-ups."""
    if caps.max_requests <= INITIAL_TEST_REQUESTS:
        raise UserError(
            f"--max-requests {caps.max_requests}: at least {INITIAL_TEST_REQUESTS + 1} "
            "(the client's initial test request, then one measured request)"
        )
    rate = study.request_rate
    if caps.max_rate is None and math.isinf(rate):
        sent = (  # a closed loop is not "all at once": say the study's own load
            f"a closed loop, {study.max_concurrency} requests at once (max_concurrency "
            f"{study.max_concurrency}, request_rate inf)"
            if study.max_concurrency
            else "all its requests at once (request_rate inf)"
        )
        raise UserError(
            f"the study sends {sent}: give --max-rate REQ_PER_S, the most this verify may "
            "send to the engine"
        )
    notes: list[str] = []
    lighter = False
    if caps.max_rate is not None and caps.max_rate < rate:
        theirs = f"{rate:g}" if math.isfinite(rate) else "inf, every request at once"
        if study.max_concurrency and not math.isfinite(rate):
            theirs = f"none: a closed loop of {study.max_concurrency}, kept"
        notes.append(f"request rate {caps.max_rate:g} req/s (--max-rate; the study's {theirs})")
        rate, lighter = caps.max_rate, True
    n = min(study.num_prompts, caps.max_requests - INITIAL_TEST_REQUESTS)
    by_time = math.floor(rate * caps.max_time_s / 2)
    if by_time < 1:
        raise UserError(
            f"--max-time {caps.max_time_s:g} s at {rate:g} req/s leaves no request to send"
        )
    n = min(n, by_time)
    if n < study.num_prompts:
        lighter = True
        notes.append(f"{n} of the study's {study.num_prompts} prompts")
    seed = study.seed if caps.seed is None else caps.seed
    if seed != study.seed:
        notes.append(
            f"prompts drawn with seed {seed}, not the study's {study.seed}: the same traffic, "
            "none an earlier verify sent (the engine's prefix cache has not seen them)"
        )
    if study.num_warmups:
        notes.append(f"none of the study's {study.num_warmups} warm-ups: a running engine is warm")
    timeout_s = min(study.request_timeout_s, caps.max_time_s)
    workload = study.model_copy(
        update={
            "num_prompts": n,
            "request_rate": rate,
            "num_warmups": 0,
            "request_timeout_s": timeout_s,
            "seed": seed,
        }
    )
    return CappedWorkload(workload, tuple(notes), lighter)

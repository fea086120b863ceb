"""The engine's own gauges, from its Prometheus `/metrics`, for early stopping's evidence.

vLLM (V1) exports `vllm:num_requests_waiting` and `vllm:kv_cache_usage_perc` (gauges, 0..1 for
the KV usage despite the name) and the counter `vllm:num_preemptions` (sample
`vllm:num_preemptions_total`), one series per engine rank (`engine="0"` ...); V0 named the KV
gauge `vllm:gpu_cache_usage_perc`. `tuner sim serve` serves the same names. Scraping is best
effort: no answer, a timeout or text without the names gives None, never an error.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator

import httpx

from tuner.measure.snapshot import EngineSample

WAITING = "vllm:num_requests_waiting"
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")  # V1, then V0
PREEMPTIONS = "vllm:num_preemptions_total"
# Counters, in prompt tokens: looked up in the prefix cache, and found there (V1).
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_HITS = "vllm:prefix_cache_hits_total"
SCRAPE_TIMEOUT_S = 1.0
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')  # one label: name="value"


def parse_samples(text: str) -> dict[str, list[float]]:
    """Prometheus text exposition -> sample name -> its values over all label sets."""
    out: dict[str, list[float]] = {}
    for name, _, value in samples(text):
        out.setdefault(name, []).append(value)
    return out


def labelled_samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Every sample of metric `name` in a Prometheus text page: its labels and value."""
    return [(dict(_LABEL.findall(labels)), v) for n, labels, v in samples(text) if n == name]


def samples(text: str) -> Iterator[tuple[str, str, float]]:
    """Each sample of a Prometheus text exposition: (name, its label text, value). Comments,
    blank lines, NaN and unparsable values are skipped (a timestamp after the value is
    allowed; label values may hold spaces and braces inside their quotes)."""
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        labels = ""
        if "{" in line:
            name, rest = line.split("{", 1)
            close = _labels_end(rest)
            if close < 0:
                continue
            labels, fields = rest[:close], rest[close + 1 :].split()
        else:
            name, *fields = line.split()
        try:
            value = float(fields[0])
        except (IndexError, ValueError):
            continue
        if not math.isnan(value):
            yield name.strip(), labels, value


def _labels_end(rest: str) -> int:
    """The index of the `}` closing a label set, quotes and escapes respected; -1: none."""
    quoted = escaped = False
    for i, ch in enumerate(rest):
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == '"':
            quoted = not quoted
        elif ch == "}" and not quoted:
            return i
    return -1


def engine_sample(text: str, t_s: float) -> EngineSample | None:
    """The gauges early stopping reads, summed over ranks (KV usage: the fullest rank);
    None without a waiting-queue gauge."""
    samples = parse_samples(text)
    if WAITING not in samples:
        return None
    kv = next((samples[k] for k in KV_USAGE if k in samples), None)
    preempt = samples.get(PREEMPTIONS)
    return EngineSample(
        t_s=t_s,
        waiting=round(sum(samples[WAITING])),
        kv_cache_usage=max(kv) if kv else None,
        preemptions=round(sum(preempt)) if preempt else None,
    )


def prefix_cache_tokens(text: str) -> tuple[float, float] | None:
    """(queried, hit) prompt tokens of the prefix cache so far, summed over ranks; None when
    the engine exports no such counters (prefix caching off in V0, or not vLLM)."""
    samples = parse_samples(text)
    if PREFIX_QUERIES not in samples or PREFIX_HITS not in samples:
        return None
    return sum(samples[PREFIX_QUERIES]), sum(samples[PREFIX_HITS])


def prefix_cache_hit_rate(
    before: tuple[float, float] | None, after: tuple[float, float] | None
) -> float | None:
    """The share of prompt tokens found in the prefix cache between two scrapes (0..1);
    None when either scrape has no counters or nothing was looked up in between."""
    if before is None or after is None:
        return None
    queried, hit = after[0] - before[0], after[1] - before[1]
    return hit / queried if queried > 0 and 0 <= hit <= queried else None


async def scrape_prefix_cache(
    client: httpx.AsyncClient, base_url: str, headers: dict[str, str]
) -> tuple[float, float] | None:
    """The prefix-cache counters now (best effort: None on any failure)."""
    auth = {k: v for k, v in headers.items() if k.lower() == "authorization"}
    try:
        resp = await client.get(
            base_url.rstrip("/") + "/metrics", headers=auth, timeout=SCRAPE_TIMEOUT_S
        )
        resp.raise_for_status()
        return prefix_cache_tokens(resp.text)
    except (httpx.HTTPError, OSError, UnicodeDecodeError):
        return None


class Scraper:
    """Scrapes `<base_url>/metrics` inside the benchmark's event loop, on its own connection
    (the workload's pool may be full). Remembers every sample of the run, oldest first."""

    def __init__(self, base_url: str, headers: dict[str, str]) -> None:
        self.url = base_url.rstrip("/") + "/metrics"
        self.headers = {k: v for k, v in headers.items() if k.lower() == "authorization"}
        self.samples: list[EngineSample] = []
        self.failures = 0

    async def scrape(self, client: httpx.AsyncClient, t_s: float) -> None:
        try:
            resp = await client.get(self.url, headers=self.headers, timeout=SCRAPE_TIMEOUT_S)
            resp.raise_for_status()
            sample = engine_sample(resp.text, t_s)
        except (httpx.HTTPError, OSError, UnicodeDecodeError):
            sample = None
        if sample is None:
            self.failures += 1
        else:
            self.samples.append(sample)

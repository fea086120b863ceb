"""What a running engine says about itself: its vLLM version, its GPU and its flags.

Read-only GETs, best effort, each endpoint where the engine offers it: `/version` (vLLM's;
`tuner sim serve` says `sim-<tuner version>`), `/v1/models` (served names, `max_model_len`),
`/metrics` (`vllm:cache_config_info`'s labels) and, in vLLM's dev mode only,
`/server_info?config_format=json` (the whole `VllmConfig` and `collect_env`'s GPUs). Which flag
comes from where, with vLLM's sources: docs/verify.md, "What changed".

Without `/server_info`, `MetricsWatch` bounds the two scheduler flags from `/metrics` while the
workload runs (`inferred_bounds`, with `least_cached` sharing the run's prefix-cache hits among
its prompts); why each bound is sound, and what a light workload cannot show, is the same
section ("Scheduler flags inferred from `/metrics`").

What callers may assume: flags come back under vLLM's dash names (`max-num-batched-tokens`), so
they compare with the exported command's; a flag the engine keeps to itself is left out, not
guessed; an inferred bound is only ever a bound (`at_least` or `at_most`), sound though a
sampled peak may be missed.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType

import httpx

from tuner.spec.values import Scalar
from tuner.tls import tls_context
from tuner.workload.client import request_headers
from tuner.workload.engine_metrics import labelled_samples

CONFIG_SECTIONS = ("model_config", "cache_config", "scheduler_config", "parallel_config")
# vLLM's config field for a flag whose name is not the field's (`--kv-cache-dtype`)
_FIELD_OF = {"kv-cache-dtype": "cache_dtype"}
STEP_TOKENS = "vllm:iteration_tokens_total"
RUNNING = "vllm:num_requests_running"
PREFIX_HITS = "vllm:prefix_cache_hits_total"
WATCH_INTERVAL_S = 0.5  # between two reads of /metrics while the workload runs


@dataclass(frozen=True)
class EngineInfo:
    version: str | None = None
    gpu: str | None = None  # as the engine names it (collect_env's nvidia_gpu_models)
    config: dict[str, object] = field(default_factory=dict)  # vLLM config field -> value
    env: dict[str, object] = field(default_factory=dict)  # VLLM_* variables it runs with
    sources: tuple[str, ...] = ()  # the endpoints that answered

    def flag(self, name: str) -> object:
        """The engine's value of flag `name` (dash or env name); None: not exposed."""
        if name.startswith("VLLM_"):
            return self.env.get(name)
        key = _FIELD_OF.get(name, name.replace("-", "_"))
        return self.config.get(key)

    def as_json(self) -> dict[str, object]:
        return {
            "version": self.version,
            "gpu": self.gpu,
            "config": self.config,
            "sources": list(self.sources),
        }


def read_engine_info(
    base_url: str, model: str, api_key: str | None, timeout_s: float = 10.0
) -> EngineInfo:
    """What the engine at `base_url` states about itself (nothing sent but GETs)."""
    url = base_url.rstrip("/")
    headers = request_headers(api_key)
    sources: list[str] = []
    config: dict[str, object] = {}
    env: dict[str, object] = {}
    version = gpu = None
    with httpx.Client(
        headers=headers, timeout=timeout_s, verify=tls_context(), trust_env=False
    ) as client:
        if (got := _json(client, url + "/version")) is not None:
            sources.append("/version")
            version = got.get("version") if isinstance(got, dict) else None
        text = _text(client, url + "/metrics")
        if text is not None and (labels := cache_config_labels(text)):
            sources.append("/metrics")
            config.update(labels)
        info = _json(client, url + "/server_info?config_format=json")
        if isinstance(info, dict) and isinstance(info.get("vllm_config"), dict):
            sources.append("/server_info")
            config.update(server_config(info["vllm_config"]))
            system = info.get("system_env") or {}
            gpu = system.get("nvidia_gpu_models") or None
            version = version or system.get("vllm_version")
            env = dict(info.get("vllm_env") or {})
        cards = _json(client, url + "/v1/models")
    for card in (cards or {}).get("data", []) if isinstance(cards, dict) else []:
        if isinstance(card, dict) and card.get("id") == model and card.get("max_model_len"):
            config["max_model_len"] = card["max_model_len"]
            sources.append("/v1/models")
    return EngineInfo(version, gpu, config, env, tuple(sources))


def cache_config_labels(text: str) -> dict[str, str]:
    """The labels of `vllm:cache_config_info` in a Prometheus text page ({} when absent)."""
    for found, _ in labelled_samples(text, "vllm:cache_config_info"):
        found.pop("engine", None)
        return {k: v for k, v in found.items() if v not in ("None", "")}
    return {}


def server_config(vllm_config: Mapping[str, object]) -> dict[str, Scalar]:
    """The scalar fields of `/server_info`'s config sections, field name -> value."""
    out: dict[str, Scalar] = {}
    for section in CONFIG_SECTIONS:
        part = vllm_config.get(section)
        if isinstance(part, dict):
            out.update(
                {
                    k: v
                    for k, v in part.items()
                    if isinstance(v, str | int | float | bool) and k not in out
                }
            )
    return out


def _get(client: httpx.Client, url: str) -> httpx.Response | None:
    try:
        resp = client.get(url)
    except httpx.HTTPError:
        return None
    return resp if resp.status_code == 200 else None


def _json(client: httpx.Client, url: str) -> object:
    resp = _get(client, url)
    try:
        return resp.json() if resp is not None else None
    except ValueError:
        return None


def _text(client: httpx.Client, url: str) -> str | None:
    resp = _get(client, url)
    return resp.text if resp is not None else None


@dataclass(frozen=True)
class Bound:
    """A flag's bound read from the engine's /metrics: at least `at_least`, or at most
    `at_most` (one of them)."""

    flag: str
    at_least: int | None
    evidence: str  # in words: what the engine did
    at_most: int | None = None

    @property
    def words(self) -> str:
        """`≥ 1025` or `≤ 512`."""
        return f"≥ {self.at_least}" if self.at_least is not None else f"≤ {self.at_most}"

    def excludes(self, value: float) -> bool:
        """Whether the engine cannot be running `value`."""
        low, high = self.at_least, self.at_most
        return (low is not None and value < low) or (high is not None and value > high)


def step_tokens_above(text: str) -> int | None:
    """The most tokens a step of the engine is known to have exceeded: the upper edge of the
    bucket below the highest `vllm:iteration_tokens_total` bucket that holds a step (per
    engine, the largest); None when no step is known to exceed a bucket's edge."""
    found = None
    for buckets in _step_buckets(text).values():
        total = buckets.get(math.inf)
        below = [edge for edge, n in buckets.items() if edge < math.inf and total and n < total]
        if below:  # some step held more than the largest such edge
            edge = int(max(below))
            found = edge if found is None else max(found, edge)
    return found


def step_tokens_at_most(text: str) -> int | None:
    """The fewest tokens every step of the engine is known to have held at most: the lowest
    `vllm:iteration_tokens_total` bucket edge that holds every step (per engine, the
    largest); None when no step ran, or one ran past the last edge."""
    found = None
    for buckets in _step_buckets(text).values():
        total = buckets.get(math.inf)
        if not total:
            continue
        edge = min((e for e, n in buckets.items() if n >= total), default=math.inf)
        if edge == math.inf:
            return None
        found = int(edge) if found is None else max(found, int(edge))
    return found


def _step_buckets(text: str) -> dict[str, dict[float, float]]:
    """Each engine's `vllm:iteration_tokens_total` buckets: edge (inf for +Inf) → steps."""
    per_engine: dict[str, dict[float, float]] = {}
    for labels, count in labelled_samples(text, STEP_TOKENS + "_bucket"):
        le = labels.get("le", "")
        edge = math.inf if le in ("+Inf", "Inf", "inf") else float(le) if le else None
        if edge is not None:
            per_engine.setdefault(labels.get("engine", ""), {})[edge] = count
    return per_engine


def prefix_hits(text: str) -> float:
    """The prefix cache's hits so far, in tokens, over every engine (0 where not shown)."""
    return sum(v for _, v in labelled_samples(text, PREFIX_HITS))


def requests_running(text: str) -> int | None:
    """The most requests one engine runs at once now (`vllm:num_requests_running`)."""
    values = [v for _, v in labelled_samples(text, RUNNING)]
    return int(max(values)) if values else None


def inferred_bounds(
    step_above: int | None, running_max: int | None, budget_below: Bound | None = None
) -> list[Bound]:
    """The flags the engine's /metrics bound: `--max-num-batched-tokens` above the most tokens
    a step exceeded (or `budget_below`, `budget_at_most`'s), `--max-num-seqs` at least the most
    requests it ran at once."""
    out = [budget_below] if budget_below is not None else []
    if step_above is not None:
        out.append(
            Bound(
                "max-num-batched-tokens",
                step_above + 1,
                f"a step of more than {step_above} tokens ran ({STEP_TOKENS})",
            )
        )
    if running_max:
        out.append(
            Bound(
                "max-num-seqs",
                running_max,
                f"{running_max} requests ran at once ({RUNNING}, read every "
                f"{WATCH_INTERVAL_S:g} s)",
            )
        )
    return out


def least_cached(prompts: Sequence[int], hits: float) -> tuple[int, float, int]:
    """`(P, h, k)`: k of the prompts hold at least P tokens each, and the run's `hits` cached
    tokens, shared among them, leave one with at most h = hits / k cached; the k whose P − h is
    largest. No prompt: `(0, hits, 1)`."""
    found = (0, hits, 1)
    for k, tokens in enumerate(sorted(prompts, reverse=True), 1):
        if tokens - hits / k > found[0] - found[1]:
            found = (tokens, hits / k, k)
    return found


def budget_at_most(
    step_at_most: int | None, prompt_tokens: int, hits: float, among: int = 1
) -> Bound | None:
    """`--max-num-batched-tokens` at most `step_at_most` when a prompt of `prompt_tokens` was
    prefilled with at most `hits` of them from the prefix cache and the rest is more than
    any step held (the module's docstring); `among`: one of that many prompts of at least
    `prompt_tokens` (`least_cached`). None where that does not follow."""
    if step_at_most is None or prompt_tokens - hits <= step_at_most:
        return None
    held = f"no step held more than {step_at_most} tokens ({STEP_TOKENS}) though "
    if among == 1:
        why = f"a prompt of {prompt_tokens} tokens was prefilled, at most {hits:.0f} of them cached"
    else:
        why = (
            f"{among} prompts of at least {prompt_tokens} tokens were prefilled, one of them with "
            f"at most {hits:.0f} cached (the run's {hits * among:.0f} cache hits among them)"
        )
    return Bound("max-num-batched-tokens", None, held + why, at_most=step_at_most)


class MetricsWatch:
    """Reads the engine's /metrics every `WATCH_INTERVAL_S` while the workload runs (a
    thread; GETs only), keeping the most requests it ran at once, and once more at the end
    for the steps' histogram (`bounds`)."""

    def __init__(self, base_url: str, api_key: str | None, timeout_s: float = 5.0) -> None:
        self._url = base_url.rstrip("/") + "/metrics"
        self._client = httpx.Client(
            headers=request_headers(api_key),
            timeout=timeout_s,
            verify=tls_context(),
            trust_env=False,
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="verify-metrics", daemon=True)
        self._running: int | None = None
        self._last = ""
        self._hits_before = 0.0

    def __enter__(self) -> MetricsWatch:
        self._read()  # before anything is sent: the prefix cache's hits so far
        self._hits_before = prefix_hits(self._last)
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()
        self._read()
        self._client.close()

    def _read(self) -> None:
        text = _text(self._client, self._url)
        if text is None:
            return
        self._last = text
        now = requests_running(text)
        if now is not None:
            self._running = now if self._running is None else max(self._running, now)

    def _watch(self) -> None:
        while True:
            self._read()
            if self._stop.wait(WATCH_INTERVAL_S):
                return

    def bounds(self, prompts: Sequence[int] = ()) -> list[Bound]:
        """The flags bounded by what the engine did while watched (after the `with`);
        `prompts`: the tokens of each prompt it answered meanwhile."""
        hits = prefix_hits(self._last) - self._hits_before
        tokens, cached, among = least_cached(prompts, hits)
        below = budget_at_most(step_tokens_at_most(self._last), tokens, cached, among)
        return inferred_bounds(step_tokens_above(self._last), self._running, below)

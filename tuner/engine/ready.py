"""Readiness of an OpenAI-compatible engine: `/health` answers 200 and `/v1/models` lists models.

vLLM answers `/health` only once the engine is up (connection refused before, 503 when the
engine died), and `/v1/models` gives the served names the client must send. `/version` is
read once at the end; engines without it (or with a different shape) give `version=None`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from tuner.errors import NotReady
from tuner.tls import tls_context

POLL_S = 0.25
PROBE_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class ReadyInfo:
    """What a ready engine told us: seconds from launch to ready, its version and model names."""

    startup_s: float
    version: str | None
    models: list[str] = field(default_factory=list)


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def probe_models(client: httpx.Client, base_url: str) -> list[str] | None:
    """The served model names once `/health` is 200 and `/v1/models` lists some; else None."""
    try:
        if client.get(f"{base_url}/health").status_code != 200:
            return None
        resp = client.get(f"{base_url}/v1/models")
        if resp.status_code != 200:
            return None
        models = [m["id"] for m in resp.json().get("data", []) if "id" in m]
    except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return models or None


def read_version(client: httpx.Client, base_url: str) -> str | None:
    """`/version`'s `version` field, or None when the engine has no such endpoint."""
    try:
        resp = client.get(f"{base_url}/version")
        version = resp.json().get("version") if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return str(version) if version is not None else None


def _probe_engine(
    client: httpx.Client, base_url: str, owned: Callable[[], bool] | None
) -> tuple[list[str] | None, bool]:
    """The models of a ready engine (else None), and whether a foreign server answered.

    An answer counts only once the listening socket is proven the engine's: then the engine is
    probed again, so that answer cannot come from a server that left the port meanwhile; a
    check after it catches a foreign listener that joined through SO_REUSEPORT.
    """
    models = probe_models(client, base_url)
    if models is None or owned is None:
        return models, False
    if not owned():
        return None, True
    models = probe_models(client, base_url)
    if models is not None and not owned():
        return None, True
    return models, False


def wait_ready(
    base_url: str,
    timeout_s: float,
    *,
    alive: Callable[[], bool],
    started_at: float,
    api_key: str | None = None,
    on_tick: Callable[[float], None] | None = None,
    owned: Callable[[], bool] | None = None,
) -> ReadyInfo:
    """Poll until the engine at `base_url` is ready, measuring from `started_at` (monotonic).

    `alive()` is checked every poll so an engine that died is noticed at once, not at the
    timeout. `owned()`, asked once a server answers, proves that server is the engine: while
    it says False another process answers on the port, and the engine is not ready.
    `on_tick(elapsed_s)` lets a progress display follow. Raises NotReady.
    """
    base_url = base_url.rstrip("/")
    deadline = time.monotonic() + timeout_s
    timeout = httpx.Timeout(PROBE_TIMEOUT_S)
    # No keep-alive: every probe is a new connection, accepted by whoever listens now.
    limits = httpx.Limits(max_keepalive_connections=0)
    with httpx.Client(
        timeout=timeout,
        headers=_headers(api_key),
        limits=limits,
        trust_env=False,
        verify=tls_context(),
    ) as client:
        while True:
            models, foreign = _probe_engine(client, base_url, owned)
            if models is not None:
                startup_s = time.monotonic() - started_at
                return ReadyInfo(startup_s, read_version(client, base_url), models)
            if not alive():
                raise NotReady(exited=True, foreign=foreign)
            now = time.monotonic()
            if now >= deadline:
                raise NotReady(exited=False, foreign=foreign)
            if on_tick is not None:
                on_tick(now - started_at)
            time.sleep(min(POLL_S, max(0.0, deadline - now)))

"""What a server says about itself before a run: its time scale, its model cards, and so which
of its models to request.

Plain GETs, one each, apart from the streamed requests (`tuner.workload.client`): `GET /version`
says how many simulated seconds `tuner sim serve --time-scale N` serves per wall second (and
`scaled_clock` is a clock in those seconds); `GET /v1/models` lists the served models, with
`max_model_len` on vLLM's and the simulator's cards; `model_to_request` picks from them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NotRequired, TypedDict

import httpx

from tuner.errors import UserError
from tuner.tls import tls_context
from tuner.workload.client import request_headers


class ModelCard(TypedDict):
    """One card of `GET /v1/models` (its `id` checked a string; the rest as the server sent)."""

    id: str
    max_model_len: NotRequired[object]  # vLLM's and the simulator's; read only when an int


def scaled_clock(time_scale: float) -> Callable[[], float]:
    """perf_counter in the server's seconds: `time_scale` simulated seconds per wall second
    (`server_time_scale`); plain perf_counter at 1."""
    if time_scale == 1.0:
        return time.perf_counter
    return lambda: time.perf_counter() * time_scale


def server_time_scale(base_url: str, api_key: str | None = None, timeout_s: float = 10.0) -> float:
    """Simulated seconds per wall second of the server: `tuner sim serve --time-scale N` says N
    in `GET /version` (a test setting, docs/simulator.md); 1 for every other server (vLLM,
    no /version, no answer), which serves in real time."""
    try:
        resp = httpx.get(
            base_url.rstrip("/") + "/version",
            headers=request_headers(api_key),
            timeout=timeout_s,
            verify=tls_context(),
        )
        scale = resp.json().get("time_scale", 1.0) if resp.status_code == 200 else 1.0
    except (httpx.HTTPError, ValueError, AttributeError):
        return 1.0
    ok = isinstance(scale, int | float) and not isinstance(scale, bool) and scale >= 1
    return float(scale) if ok else 1.0


def server_model_cards(
    base_url: str, api_key: str | None = None, timeout_s: float = 10.0
) -> list[ModelCard] | None:
    """The model cards of `GET /v1/models` (vLLM's carry `max_model_len`), or None when the
    server has no such list (404 or 405, or an answer that is not an OpenAI model list).
    Unreachable, or any other HTTP error (a refused API key, a server error), is a UserError."""
    url = base_url.rstrip("/") + "/v1/models"
    try:
        resp = httpx.get(
            url, headers=request_headers(api_key), timeout=timeout_s, verify=tls_context()
        )
    except httpx.HTTPError as exc:
        raise UserError(
            f"cannot reach the server at {base_url}: {exc or type(exc).__name__}"
        ) from None
    if resp.status_code in (404, 405):
        return None
    if resp.status_code != 200:
        raise UserError(f"{url} answered HTTP {resp.status_code}: {resp.text[:200]}")
    try:
        cards = resp.json()["data"]
        ok = isinstance(cards, list) and all(isinstance(c["id"], str) for c in cards)
    except (ValueError, KeyError, TypeError):
        return None
    return cards if ok else None


def served_max_model_len(cards: list[ModelCard] | None, model: str) -> int | None:
    """`max_model_len` of `model`'s card, when the server states it (vLLM and the simulator)."""
    card = next((c for c in cards or [] if c.get("id") == model), None)
    value = card.get("max_model_len") if card else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def model_to_request(url: str, model: str | None, cards: list[ModelCard] | None) -> str:
    """The model to request. A server without a model list (`cards` None) is trusted with
    `--model`, as vLLM's client does (it never asks); a list without that model is a user
    error."""
    if cards is None:
        if model is None:
            raise UserError(f"{url} has no model list at /v1/models: give --model")
        return model
    served = [c["id"] for c in cards]
    if model is None:
        if not served:
            raise UserError(f"{url} serves no model")
        return served[0]
    if model not in served:
        raise UserError(f"model {model!r} is not served at {url} (it serves: {', '.join(served)})")
    return model

"""The streaming HTTP client: one request in, one `RequestRecord` out, timed like vLLM.

httpx's request/response types over the `httpx-aiohttp` transport: httpx's default
transport collapses at a few hundred concurrent streams (brief §5), aiohttp's does not.
Timestamps follow `vllm bench serve` (docs/metrics.md): `st` just before the POST, TTFT at
the first message with non-empty `choices`, one ITL per such message, E2EL at the last one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport

from tuner.measure.records import RequestRecord
from tuner.tls import tls_context
from tuner.workload.request import BenchRequest
from tuner.workload.sse import SseDecoder, interpret

CHAT_ENDPOINT = "/v1/chat/completions"
ERROR_BODY_CHARS = 300  # of an error body, kept in the record
ERROR_BODY_READ = 64 * 1024  # read at most this much of an error body (the rest is dropped)


class StreamActivity:
    """Shared by the streams of one run, for hang detection: requests in flight and the
    last time any of them received an SSE message, or the run became busy after being idle.
    New sends while busy do not count: an engine that takes requests but streams nothing
    is hung."""

    __slots__ = ("in_flight", "last_s")

    def __init__(self) -> None:
        self.in_flight = 0
        self.last_s = time.perf_counter()


def make_transport(max_concurrency: int | None) -> AiohttpTransport:
    """httpx's aiohttp transport with as many connections as streams (0 = unlimited), like
    vLLM's TCPConnector. Create it inside the event loop that uses it; close with aclose()."""
    connector = aiohttp.TCPConnector(
        limit=max_concurrency or 0,
        limit_per_host=max_concurrency or 0,
        keepalive_timeout=60,
        force_close=False,
    )
    session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None))
    return AiohttpTransport(client=session, verify=tls_context())


def request_body(endpoint: str, model: str, req: BenchRequest) -> bytes:
    """The JSON body vLLM's request functions send (`openai` and `openai-chat` backends)."""
    body: dict[str, object] = {"model": model}
    if endpoint == CHAT_ENDPOINT:
        messages = (
            req.prompt
            if isinstance(req.prompt, list)
            else [{"role": "user", "content": req.prompt}]
        )
        body["messages"] = messages
        if req.output_len is not None:
            body["max_completion_tokens"] = req.output_len
    else:
        body["prompt"] = req.prompt
        body["repetition_penalty"] = 1.0
        if req.output_len is not None:
            body["max_tokens"] = req.output_len
    body["stream"] = True
    body["stream_options"] = {"include_usage": True}
    if req.ignore_eos:
        body["ignore_eos"] = True
    return json.dumps(body).encode()


def request_headers(api_key: str | None) -> dict[str, str]:
    """`Accept-Encoding: identity`: the stream is read raw (no decoding at 100k chunks/s),
    so a server must not compress it; aiohttp would otherwise offer gzip and deflate."""
    headers = {"Content-Type": "application/json", "Accept-Encoding": "identity"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


async def stream_request(
    transport: httpx.AsyncBaseTransport,
    url: httpx.URL | str,
    body: bytes,
    headers: dict[str, str],
    *,
    prompt_len: int,
    chat: bool,
    t0: float,
    activity: StreamActivity | None = None,
    connect_timeout_s: float | None = None,
    rec: RequestRecord | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> RequestRecord:
    """Send one streaming request; never raises for a failed request (the record says why).

    `t0` is the run's first dispatch on `clock` (perf_counter, or
    `tuner.workload.probe.scaled_clock`), so `start_s = st - t0`. Success needs
    a token message and `[DONE]`, with no in-stream error. No read timeout here (a timer per
    read costs at 100k chunks/s): the caller bounds the whole request.
    """
    activity = activity or StreamActivity()
    rec = rec or RequestRecord(prompt_len=prompt_len)  # given: the caller watches it fill
    # httpx's transport API, called directly: AsyncClient.send() adds cookie, auth and
    # redirect handling per request that a benchmark does not need (a quarter of the CPU,
    # and more loop latency, at 512 streams; docs/performance.md).
    timeouts = {"connect": connect_timeout_s, "read": None, "write": None, "pool": None}
    request = httpx.Request(
        "POST", url, content=body, headers=headers, extensions={"timeout": timeouts}
    )
    st = clock()
    if not activity.in_flight:  # busy from now: the hang clock starts here, not at each send
        activity.last_s = st
    activity.in_flight += 1
    rec.start_s = st - t0
    try:
        resp = await transport.handle_async_request(request)
        try:
            encoding = resp.headers.get("content-encoding", "identity").strip().lower()
            if encoding != "identity":  # asked for identity; the raw bytes would be garbage
                rec.error = (
                    f"HTTP {resp.status_code}: the server compressed the body "
                    f"(Content-Encoding: {encoding[:40]}) though the client asked for identity"
                )
            elif resp.status_code == 200:
                await _read_stream(resp, rec, chat, st, activity, clock)
            else:
                raw = (await _read_head(resp, ERROR_BODY_READ))[:ERROR_BODY_CHARS]
                text = raw.decode("utf-8", "replace")
                rec.error = f"HTTP {resp.status_code}: {' '.join(text.split())}"
        finally:
            await resp.aclose()
    except (httpx.HTTPError, aiohttp.ClientError, ValueError, OSError) as exc:
        rec.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    except TimeoutError:
        rec.error = "request timed out"
    finally:
        activity.in_flight -= 1
    rec.success = not rec.error
    return rec


async def _read_head(resp: httpx.Response, limit: int) -> bytes:
    """At most `limit` bytes of the body: a huge error body is not read whole (closing the
    response then drops the connection instead of reusing it)."""
    parts, size = [], 0
    async for chunk in resp.aiter_raw():
        parts.append(chunk)
        size += len(chunk)
        if size >= limit:
            break
    return b"".join(parts)[:limit]


async def _read_stream(
    resp: httpx.Response,
    rec: RequestRecord,
    chat: bool,
    st: float,
    activity: StreamActivity,
    clock: Callable[[], float],
) -> None:
    """Fill `rec` from the SSE stream: timestamps per message with choices, usage, errors."""
    decoder = SseDecoder()
    itl, text = rec.itl_s, []
    last_token_t = st
    got_token = done = False
    try:
        async for chunk in resp.aiter_raw():
            for payload in decoder.feed(chunk):  # comments (pings) are not progress
                activity.last_s = now = clock()
                kind, piece, completion_tokens, prompt_tokens, error = interpret(payload, chat)
                if kind == "token":
                    if got_token:
                        itl.append(now - last_token_t)
                    else:
                        got_token = True
                        rec.ttft_s = now - st
                    last_token_t = now
                    text.append(piece)
                elif kind == "done":
                    done = True
                elif kind == "error":
                    rec.error = f"server error in stream: {error}"
                if completion_tokens is not None:
                    rec.output_tokens = completion_tokens
                if prompt_tokens is not None:
                    rec.prompt_len = prompt_tokens
        done = any(interpret(p, chat).kind == "done" for p in decoder.flush()) or done
    finally:  # keep what arrived, even when the stream broke
        rec.generated_text = "".join(text)
        rec.latency_s = last_token_t - st
    if not rec.error and not got_token:
        rec.error = "no token received: the stream had no message with choices"
    elif not rec.error and not done:
        rec.error = "stream ended before [DONE]"

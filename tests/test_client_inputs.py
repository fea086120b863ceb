"""The streaming client against broken and hostile servers (real aiohttp servers on 127.0.0.1).

Each mode is a server that misbehaves one way: malformed chunks, absurd token counts,
compression, a huge error body. Each must give a failed request with an error string,
never a traceback, and never an infinite or garbage total.
"""

from __future__ import annotations

import asyncio
import json
import math
import time

import pytest
from aiohttp import web
from aiohttp.web_response import ContentCoding

from tuner.spec.workload import WorkloadSpec
from tuner.workload.benchmark import run_benchmark
from tuner.workload.client import (
    ERROR_BODY_READ,
    make_transport,
    request_body,
    request_headers,
    stream_request,
)
from tuner.workload.request import BenchRequest
from tuner_testing import loopback_app

STATE = web.AppKey("state", dict)
BIG_ERROR_MB = 50

# Payloads that are JSON objects but not completion chunks, each breaking a field's type.
MALFORMED = {
    "choices-int": {"choices": [1]},
    "choices-str": {"choices": "x"},
    "text-int": {"choices": [{"text": 5}]},
    "usage-float": {"choices": [{"text": "a"}], "usage": {"completion_tokens": 1e30}},
    "usage-str": {"choices": [{"text": "a"}], "usage": {"completion_tokens": "12"}},
    "usage-negative": {"choices": [{"text": "a"}], "usage": {"completion_tokens": -1}},
    "usage-huge": {"choices": [{"text": "a"}], "usage": {"completion_tokens": 10**30}},
    "usage-bool": {"choices": [{"text": "a"}], "usage": {"completion_tokens": True}},
}


def _sse(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


async def _handle(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    body = await request.json()
    state["headers"].append(dict(request.headers))
    mode = body["prompt"].split()[0]
    if mode == "big-error":  # 50 MB of error body, written as long as the client reads
        resp = web.StreamResponse(status=500, headers={"Content-Type": "text/plain"})
        await resp.prepare(request)
        try:
            for _ in range(BIG_ERROR_MB):
                await resp.write(b"E" * 2**20)
                state["error_bytes"] += 2**20
        except (ConnectionError, RuntimeError):
            pass
        return resp
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    if mode == "compress":  # gzip or deflate when the client accepts them, as servers do
        resp.enable_compression()
    elif mode == "force-gzip":  # a server that compresses whatever the client asked
        resp.enable_compression(force=ContentCoding.gzip)
    await resp.prepare(request)
    if mode in MALFORMED:
        await resp.write(_sse(MALFORMED[mode]))
    else:
        for i in range(3):
            await resp.write(_sse({"choices": [{"text": f" w{i}"}]}))
        await resp.write(
            _sse({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 3}})
        )
    await resp.write(b"data: [DONE]\n\n")
    return resp


@pytest.fixture(scope="module")
def server():
    app = web.Application()
    app[STATE] = {"headers": [], "error_bytes": 0}
    app.router.add_post("/v1/completions", _handle)
    with loopback_app(app) as url:
        yield type("Server", (), {"url": url, "state": app[STATE]})


def _request(url: str, mode: str):
    async def go():
        transport = make_transport(None)
        try:
            body = request_body("/v1/completions", "m", BenchRequest(f"{mode} 0", 3, 3, True))
            return await asyncio.wait_for(
                stream_request(
                    transport,
                    url + "/v1/completions",
                    body,
                    request_headers(None),
                    prompt_len=3,
                    chat=False,
                    t0=time.perf_counter(),
                ),
                30,
            )
        finally:
            await transport.aclose()

    return asyncio.run(go())


@pytest.mark.parametrize("mode", sorted(MALFORMED))
def test_malformed_sse_chunk_is_a_failed_request_not_a_traceback(server, mode):
    rec = _request(server.url, mode)
    assert not rec.success
    assert rec.error.startswith("ValueError: malformed SSE chunk"), rec.error
    assert isinstance(rec.output_tokens, int) and rec.output_tokens < 2**31


def test_absurd_usage_counts_leave_benchmark_totals_finite(server):
    spec = WorkloadSpec(num_prompts=3, request_timeout_s=10)
    reqs = [BenchRequest("ok 0", 3, 3, True)] + [
        BenchRequest(f"{m} 0", 3, 3, True) for m in ("usage-float", "usage-huge")
    ]
    res = run_benchmark(spec, server.url, "m", reqs)
    assert res.metrics["completed"] == 1 and res.metrics["failed"] == 2
    assert res.metrics["total_output_tokens"] == 3
    assert all(math.isfinite(v) for v in res.metrics.values())


def test_gzip_server_is_asked_for_identity_and_streams_plain(server):
    rec = _request(server.url, "compress")
    assert rec.success, rec.error
    assert rec.generated_text == " w0 w1 w2" and rec.output_tokens == 3
    assert server.state["headers"][-1]["Accept-Encoding"] == "identity"


def test_gzip_forced_by_the_server_is_a_failed_request_naming_the_encoding(server):
    rec = _request(server.url, "force-gzip")
    assert not rec.success
    assert "Content-Encoding: gzip" in rec.error


def test_huge_error_body_is_read_only_up_to_the_bound(server):
    rec = _request(server.url, "big-error")
    assert not rec.success and rec.error.startswith("HTTP 500: EEEE")
    assert len(rec.error) < 400
    time.sleep(0.5)  # let the server notice the closed connection
    # Socket buffers hold a few MB; the 50 MB body is never read whole.
    assert ERROR_BODY_READ <= 2**20
    assert server.state["error_bytes"] < (BIG_ERROR_MB // 2) * 2**20

"""The streaming client and benchmark runner against real local aiohttp SSE servers.

The server picks its behaviour from the prompt's first word: it streams like vLLM
(with pings, a role-only first delta for chat, a usage-only last chunk), answers 500,
breaks the connection mid-stream, reports an error in-stream, omits usage, or hangs.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from aiohttp import web

from tuner.spec.workload import WorkloadSpec
from tuner.workload.benchmark import BenchmarkAborted, run_benchmark
from tuner.workload.request import BenchRequest
from tuner_testing import loopback_app

SEEN = web.AppKey("seen", list)
FIRST_TOKEN_S = 0.05
GAP_S = 0.02


def _chunk(chat: bool, text: str | None, role: bool = False) -> bytes:
    if chat:
        delta = {"role": "assistant"} if role else {"content": text}
        choice = {"index": 0, "delta": delta, "finish_reason": None}
    else:
        choice = {"index": 0, "text": text, "finish_reason": None}
    return b"data: " + json.dumps({"id": "x", "choices": [choice]}).encode() + b"\n\n"


_MODES = ("ok", "http500", "hang", "stuck", "broken", "stream-error", "no-usage")


async def _handle(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    request.app[SEEN].append((dict(request.headers), body))
    prompt = body["messages"][0]["content"] if "messages" in body else body["prompt"]
    mode = prompt.split()[0]
    if mode.startswith("~"):  # a warm-up: the first prompt with its first character changed
        mode = next((m for m in _MODES if m[1:] == mode[1:]), mode)
    if mode == "http500":
        return web.Response(status=500, text="internal boom")
    chat = request.path.endswith("chat/completions")
    n = body.get("max_tokens") or body.get("max_completion_tokens") or 4
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(b": ping\n\n")
    await asyncio.sleep(FIRST_TOKEN_S)
    if chat:  # vLLM sends a role-only delta just before the first token
        await resp.write(_chunk(True, None, role=True))
    for i in range(n):
        if i:
            await asyncio.sleep(GAP_S)
        if (mode == "hang" and i == 1) or mode == "stuck":  # stop until the client gives up
            while request.transport is not None and not request.transport.is_closing():
                await asyncio.sleep(0.05)
            return resp
        await resp.write(_chunk(chat, f" w{i}"))
        if mode == "broken" and i == 1:
            request.transport.close()  # the engine died mid-stream
            return resp
        if mode == "stream-error" and i == 1:
            err = {"error": {"message": "engine overloaded", "code": 500}}
            await resp.write(b"data: " + json.dumps(err).encode() + b"\n\n")
            break
    if mode != "no-usage":
        usage = {"prompt_tokens": 11, "completion_tokens": n, "total_tokens": 11 + n}
        await resp.write(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n")
    await resp.write(b"data: [DONE]\n\n")
    return resp


@pytest.fixture(scope="module")
def server():
    """A real aiohttp server on a loopback port, in its own thread and event loop."""
    app = web.Application()
    app[SEEN] = []
    app.router.add_post("/v1/completions", _handle)
    app.router.add_post("/v1/chat/completions", _handle)
    with loopback_app(app) as url:
        yield type("Server", (), {"url": url, "seen": app[SEEN]})


def _spec(**kw) -> WorkloadSpec:
    base = {"num_prompts": 4, "percentile_metrics": "ttft,tpot,itl,e2el", "request_timeout_s": 10}
    return WorkloadSpec(**{**base, **kw})


def _reqs(n: int, out: int = 5, ignore_eos: bool = True, mode: str = "ok") -> list[BenchRequest]:
    return [BenchRequest(f"{mode} {i}", 3, out, ignore_eos) for i in range(n)]


@pytest.mark.parametrize("endpoint", ["/v1/completions", "/v1/chat/completions"])
def test_stream_timestamps_and_usage(server, endpoint):
    res = run_benchmark(_spec(endpoint=endpoint), server.url, "m", _reqs(4, out=5))
    assert res.metrics["completed"] == 4 and res.metrics["failed"] == 0
    assert res.metrics["total_output_tokens"] == 20  # from usage.completion_tokens
    assert res.metrics["total_input_tokens"] == 44  # usage.prompt_tokens replaces ours
    for rec in res.records:
        assert rec.success and rec.error == ""
        assert FIRST_TOKEN_S <= rec.ttft_s < FIRST_TOKEN_S + 0.5  # loose above: shared CPUs
        # One gap per message with choices: chat's empty first delta is one more (as vLLM).
        gaps = rec.itl_s
        if endpoint == "/v1/chat/completions":
            assert len(gaps) == 5 and gaps[0] < GAP_S / 2
            gaps = gaps[1:]
        assert len(gaps) == 4
        # Each gap jitters with thread scheduling (server and client share this process).
        assert all(0 < gap < GAP_S + 0.5 for gap in gaps)
        assert GAP_S * 0.8 <= sum(gaps) / len(gaps) < GAP_S + 0.5
        assert rec.latency_s == pytest.approx(rec.ttft_s + sum(rec.itl_s))
        assert rec.generated_text == " w0 w1 w2 w3 w4"
    tpots = [(r.latency_s - r.ttft_s) / 4 for r in res.records]  # 5 tokens from usage
    assert res.metrics["mean_tpot_ms"] == pytest.approx(1000 * sum(tpots) / 4)


def test_payload_is_vllms(server):
    server.seen.clear()
    run_benchmark(_spec(num_prompts=1), server.url, "m", _reqs(1, out=3), api_key="sk-secret")
    headers, body = server.seen[-1]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 3 and body["ignore_eos"] is True
    assert body["prompt"] == "ok 0" and body["model"] == "m"
    assert headers["Authorization"] == "Bearer sk-secret"
    run_benchmark(
        _spec(num_prompts=1, endpoint="/v1/chat/completions"),
        server.url,
        "m",
        _reqs(1, out=2, ignore_eos=False),
    )
    _, body = server.seen[-1]
    assert body["messages"] == [{"role": "user", "content": "ok 0"}]
    assert body["max_completion_tokens"] == 2 and "ignore_eos" not in body


def test_warmups_are_not_measured(server):
    server.seen.clear()
    res = run_benchmark(_spec(num_prompts=3, num_warmups=2), server.url, "m", _reqs(3, out=2))
    assert len(server.seen) == 1 + 2 + 3  # initial test request, warm-ups, measured
    assert len(res.records) == 3
    # The unmeasured ones send a prompt outside the measured set (a first request that the
    # warm-ups sent again would be measured from the engine's prefix cache), of its shape.
    prompts = [body["prompt"] for _, body in server.seen]
    assert prompts[3:] == ["ok 0", "ok 1", "ok 2"]
    assert prompts[:3] == ["~k 0"] * 3 and not set(prompts[:3]) & set(prompts[3:])
    assert {body["max_tokens"] for _, body in server.seen} == {2}


def _mixed(mode: str, n_bad: int = 3, out: int = 3) -> list[BenchRequest]:
    """A healthy first request (the initial test request re-sends it) then `n_bad` of `mode`."""
    return _reqs(1, out=out) + _reqs(n_bad, out=out, mode=mode)


def test_http_500_counts_as_failed(server):
    res = run_benchmark(_spec(), server.url, "m", _mixed("http500"))
    assert res.metrics["completed"] == 1 and res.metrics["failed"] == 3
    bad = res.records[1:]
    assert all(r.error == "HTTP 500: internal boom" and not r.success for r in bad)
    assert res.metrics["total_output_tokens"] == 3  # the healthy request only


def test_broken_stream_counts_as_failed(server):
    res = run_benchmark(_spec(), server.url, "m", _mixed("broken"))
    assert res.metrics["completed"] == 1 and res.metrics["failed"] == 3
    for rec in res.records[1:]:
        assert not rec.success and rec.error
        assert rec.generated_text == " w0 w1"  # what arrived before the break is kept


def test_in_stream_error_counts_as_failed(server):
    res = run_benchmark(_spec(), server.url, "m", _mixed("stream-error"))
    assert res.metrics["failed"] == 3
    assert all("engine overloaded" in r.error for r in res.records[1:])


def test_request_timeout_is_a_failed_record(server):
    res = run_benchmark(_spec(request_timeout_s=0.5), server.url, "m", _mixed("hang"))
    assert res.metrics["completed"] == 1 and res.metrics["failed"] == 3
    assert all(r.error == "request timed out after 0.5 s" for r in res.records[1:])


def test_initial_request_failure_aborts(server):
    with pytest.raises(BenchmarkAborted, match="initial test request failed: HTTP 500"):
        run_benchmark(_spec(), server.url, "m", _reqs(2, mode="http500"))


def test_missing_usage_retokenizes(server):
    class WordTokenizer:  # counts words, like a tokenizer would count tokens
        def __call__(self, text, add_special_tokens=False):
            return type("Enc", (), {"input_ids": text.split()})

    res = run_benchmark(_spec(num_prompts=2), server.url, "m", _reqs(2, out=6, mode="no-usage"))
    # No usage and no tokenizer: the count is unknown, so the request fails (never a guess).
    assert res.metrics["completed"] == 0 and res.metrics["failed"] == 2
    assert res.metrics["total_output_tokens"] == 0
    assert all(r.error.startswith("output tokens unknown: ") for r in res.records)
    res = run_benchmark(
        _spec(num_prompts=2),
        server.url,
        "m",
        _reqs(2, out=6, mode="no-usage"),
        tokenizer=WordTokenizer(),
    )
    assert res.metrics["total_output_tokens"] == 12


def test_stall_timeout_aborts_a_hung_engine(server):
    t = time.perf_counter()
    with pytest.raises(BenchmarkAborted, match=r"engine hung: no tokens for 0\.5 s"):
        run_benchmark(
            _spec(num_prompts=2), server.url, "m", _reqs(2, mode="hang"), stall_timeout_s=0.5
        )
    assert time.perf_counter() - t < 3


def test_should_abort_cancels_in_flight(server):
    progress = []
    polls = {"n": 0}

    def should_abort():
        polls["n"] += 1
        return "engine process died" if polls["n"] >= 3 else None

    t = time.perf_counter()
    with pytest.raises(BenchmarkAborted, match="engine process died"):
        run_benchmark(
            _spec(num_prompts=2),
            server.url,
            "m",
            _reqs(2, mode="hang"),
            should_abort=should_abort,
            on_progress=lambda done, total: progress.append(done),
        )
    assert time.perf_counter() - t < 2  # ~0.75 s of polling, not the request timeout
    assert progress == []


def test_rate_and_concurrency_limits(server):
    progress = []
    res = run_benchmark(
        _spec(num_prompts=6, request_rate=20.0, max_concurrency=2, seed=1),
        server.url,
        "m",
        _reqs(6, out=2),
        on_progress=lambda done, total: progress.append((done, total)),
    )
    assert progress == [(i, 6) for i in range(1, 7)]
    starts = sorted(r.start_s for r in res.records)
    assert starts[-1] >= 6 / 20.0 * 0.9  # paced, not all at t=0
    # With 2 slots, never more than 2 requests overlap.
    spans = [(r.start_s, r.start_s + r.latency_s) for r in res.records]
    for s, _ in spans:
        assert sum(a <= s < b for a, b in spans) <= 2
    assert res.duration_s >= max(b for _, b in spans)
    assert set(res.ci) >= {"p99_ttft_ms", "mean_tpot_ms", "output_throughput"}


def test_abort_during_paced_dispatch_sends_nothing_more(server):
    server.seen.clear()
    polls = {"n": 0}

    def should_abort():
        polls["n"] += 1
        return "engine process died" if polls["n"] >= 2 else None

    with pytest.raises(BenchmarkAborted):
        run_benchmark(
            _spec(num_prompts=20, request_rate=2.0),
            server.url,
            "m",
            _reqs(20, out=1),
            should_abort=should_abort,
        )
    sent = len(server.seen)
    time.sleep(1.0)
    assert len(server.seen) == sent < 1 + 20  # dispatch stopped with the abort


def test_stall_detected_while_new_requests_keep_arriving(server):
    # An engine that accepts requests but never streams: sends every 0.1 s must not hide it.
    reqs = _reqs(1, out=2) + _reqs(30, out=2, mode="stuck")
    t = time.perf_counter()
    with pytest.raises(BenchmarkAborted, match="engine hung"):
        run_benchmark(
            _spec(num_prompts=31, request_rate=10.0), server.url, "m", reqs, stall_timeout_s=0.5
        )
    assert time.perf_counter() - t < 2.0  # not after the last send (~3 s)

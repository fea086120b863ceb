"""How much does the client itself cost? Ours against `vllm bench serve`'s, on one core.

Both clients stream from benchmarks/instant_server.py (pinned to the last core), which
answers every request at once with `--chunks` token chunks, so everything measured is
client cost. Each client runs pinned to core 0 in its own process:
- ours: `tuner.workload.benchmark.run_benchmark` (httpx + aiohttp transport, SSE parsing,
  timestamps, records), from .venv;
- vLLM's: `vllm.benchmarks.lib.endpoint_request_func.async_request_openai_completions`
  with the aiohttp session and semaphore of `vllm bench serve`, from .venv-vllm.
Runs are interleaved, repeated, and the median reported.

Figures: sustained requests/s and token chunks/s; the client's CPU time per chunk
(process time between the first and the last completion: the cost that other load on a
shared machine does not inflate); the timestamp error, i.e. the client's first/last-token
time minus the server's write time of that chunk (both perf_counter = CLOCK_MONOTONIC,
comparable across processes), median and p99. A second suite paces the chunks
(`--paced-ms`), as a decoding engine does, to give the error at a realistic load.

    .venv/bin/python benchmarks/client_throughput.py [--requests 2000] [--chunks 128]
        [--concurrency 512 64] [--repeats 3] [--paced-ms 20]

This file must import nothing beyond the standard library at the top: it also runs, as
the vLLM client, under .venv-vllm's Python where `tuner` is not installed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OURS_PYTHON = REPO / ".venv" / "bin" / "python"
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"


def _percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


class _CpuClock:
    """Process CPU time at the first and the last completed request (both clients call it):
    the client's own cost, which other load on the machine does not inflate."""

    def __init__(self, total: int) -> None:
        self.total, self.done, self.first, self.last = total, 0, 0.0, 0.0

    def update(self, _n: int = 1) -> None:  # the tqdm method vLLM's request function calls
        self.done += 1
        if self.done == 1:
            self.first = time.process_time()
        if self.done == self.total:
            self.last = time.process_time()

    def us_per_chunk(self, chunks: int) -> float:
        return (self.last - self.first) / max(1, (self.total - 1) * chunks) * 1e6


def _summary(
    url: str, duration_s: float, rows: list[tuple[str, bool, int, float, float]], cpu_us: float
) -> dict:
    """rows: (prompt, success, output_tokens, first_token_perf_s, last_token_perf_s)."""
    with urllib.request.urlopen(url + "/timings") as resp:
        sent = {prompt: (first, last) for prompt, first, last in json.load(resp)}
    ok = [r for r in rows if r[1]]
    first = [(r[3] - sent[r[0]][0]) * 1000 for r in ok if r[0] in sent]
    last = [(r[4] - sent[r[0]][1]) * 1000 for r in ok if r[0] in sent]
    return {
        "completed": len(ok),
        "failed": len(rows) - len(ok),
        "duration_s": duration_s,
        "req_per_s": len(ok) / duration_s,
        "chunks_per_s": sum(r[2] for r in ok) / duration_s,
        "cpu_us_per_chunk": cpu_us,
        "first_err_ms_p50": statistics.median(first),
        "first_err_ms_p99": _percentile(first, 99),
        "last_err_ms_p50": statistics.median(last),
        "last_err_ms_p99": _percentile(last, 99),
    }


def run_ours(url: str, n: int, chunks: int, concurrency: int) -> dict:
    from tuner.spec.workload import WorkloadSpec
    from tuner.workload.benchmark import run_benchmark
    from tuner.workload.request import BenchRequest

    spec = WorkloadSpec(num_prompts=n, max_concurrency=concurrency, random_output_len=chunks)
    requests = [BenchRequest(f"req-{i}", 1, chunks, ignore_eos=True) for i in range(n)]
    cpu = _CpuClock(n)
    res = run_benchmark(spec, url, "instant", requests, on_progress=lambda _d, _t: cpu.update())
    t0 = res.start_perf_s
    rows = [
        (
            f"req-{i}",
            r.success,
            r.output_tokens,
            t0 + r.start_s + r.ttft_s,
            t0 + r.start_s + r.latency_s,
        )
        for i, r in enumerate(res.records)
    ]
    return _summary(url, res.duration_s, rows, cpu.us_per_chunk(chunks))


def run_vllm(url: str, n: int, chunks: int, concurrency: int) -> dict:
    import aiohttp
    from vllm.benchmarks.lib.endpoint_request_func import (
        RequestFuncInput,
        async_request_openai_completions,
    )

    cpu = _CpuClock(n)

    async def main() -> tuple[float, list]:
        # The session and semaphore of vllm/benchmarks/serve.py's benchmark().
        connector = aiohttp.TCPConnector(
            limit=concurrency,
            limit_per_host=concurrency,
            ttl_dns_cache=300,
            use_dns_cache=True,
            keepalive_timeout=60,
            enable_cleanup_closed=True,
            force_close=False,
            ssl=False,
        )
        timeout = aiohttp.ClientTimeout(total=6 * 60 * 60)
        async with aiohttp.ClientSession(
            connector=connector, trust_env=True, timeout=timeout
        ) as session:
            sem = asyncio.Semaphore(concurrency)

            def inp(prompt: str) -> RequestFuncInput:
                return RequestFuncInput(
                    prompt=prompt,
                    api_url=url + "/v1/completions",
                    prompt_len=1,
                    output_len=chunks,
                    model="instant",
                    ignore_eos=True,
                )

            async def limited(i: int):
                async with sem:
                    return await async_request_openai_completions(
                        inp(f"req-{i}"), session, pbar=cpu
                    )

            await async_request_openai_completions(inp("initial"), session)
            start = time.perf_counter()
            outs = await asyncio.gather(*(limited(i) for i in range(n)))
            return time.perf_counter() - start, outs

    duration_s, outs = asyncio.run(main())
    rows = [
        (f"req-{i}", o.success, o.output_tokens, o.start_time + o.ttft, o.start_time + o.latency)
        for i, o in enumerate(outs)
    ]
    return _summary(url, duration_s, rows, cpu.us_per_chunk(chunks))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _pinned(core: int, python: Path, script: str) -> list[str]:
    return ["taskset", "-c", str(core), str(python), script]


def _client(python: Path, which: str, url: str, n: int, chunks: int, conc: int) -> dict:
    argv = [*_pinned(0, python, __file__), "--client", which, "--url", url]
    argv += ["--requests", str(n), "--chunks", str(chunks), "--concurrency", str(conc)]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=600)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _suite(args: argparse.Namespace, interval_ms: float, concurrencies: list[int], n: int) -> dict:
    """Start a server (instant, or paced at `interval_ms`), run both clients interleaved."""
    server_core = max(os.sched_getaffinity(0))
    port = _free_port()
    server_script = str(REPO / "benchmarks" / "instant_server.py")
    server = subprocess.Popen(
        [
            *_pinned(server_core, OURS_PYTHON, server_script),
            *("--port", str(port), "--interval-ms", str(interval_ms)),
        ],
        stdout=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    results: dict[tuple[str, int], list[dict]] = {}
    try:
        time.sleep(1.0)
        for conc in concurrencies:
            for rep in range(args.repeats):
                for which, python in (("ours", OURS_PYTHON), ("vllm", VLLM_PYTHON)):
                    r = _client(python, which, url, n, args.chunks, conc)
                    results.setdefault((which, conc), []).append(r)
                    print(f"# {interval_ms} ms {which} c={conc} rep={rep}: {json.dumps(r)}")
    finally:
        server.terminate()
        server.wait(10)
    return results


def _table(title: str, results: dict) -> None:
    print(f"\n{title}\n")
    print(
        "| client | streams | req/s | chunks/s | client CPU per chunk (µs) "
        "| first-token error p50 / p99 (ms) | last-token error p50 / p99 (ms) | failed |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    names = {"ours": "tuner (httpx + aiohttp transport)", "vllm": "vllm bench serve's client"}
    for (which, conc), runs in results.items():
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        failed = max(r["failed"] for r in runs)
        print(
            f"| {names[which]} | {conc} | {med['req_per_s']:,.0f} | {med['chunks_per_s']:,.0f} | "
            f"{med['cpu_us_per_chunk']:.2f} | "
            f"{med['first_err_ms_p50']:.1f} / {med['first_err_ms_p99']:.1f} | "
            f"{med['last_err_ms_p50']:.1f} / {med['last_err_ms_p99']:.1f} | {failed} |"
        )


def orchestrate(args: argparse.Namespace) -> None:
    server_core = max(os.sched_getaffinity(0))
    where = f"client on core 0, server on core {server_core}, median of {args.repeats}"
    instant = _suite(args, 0.0, args.concurrency, args.requests)
    _table(f"Instant server: {args.requests} requests x {args.chunks} chunks; {where}", instant)
    if args.paced_ms > 0:
        n = 2 * max(args.concurrency)
        paced = _suite(args, args.paced_ms, [max(args.concurrency)], n)
        _table(
            f"Paced server, one chunk every {args.paced_ms:g} ms per stream: {n} requests x "
            f"{args.chunks} chunks; {where}",
            paced,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--client", choices=["ours", "vllm"])
    parser.add_argument("--url")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--chunks", type=int, default=128)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[512, 64])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--paced-ms", type=float, default=20.0, help="also run a paced server (0: skip)"
    )
    args = parser.parse_args()
    if args.client is None:
        orchestrate(args)
        return
    run = run_ours if args.client == "ours" else run_vllm
    print(json.dumps(run(args.url, args.requests, args.chunks, args.concurrency[0])))


if __name__ == "__main__":
    main()

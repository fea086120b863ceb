"""How vLLM's API server admits a burst: the TTFT of N requests sent at once, real and simulated.

One real engine (vLLM's CPU build, the tiny dummy model, vLLM's default batch limits, block
size 32, a 4 GiB KV cache, server pinned to the last core), then `--bursts` bursts of
`--requests` streaming completions sent at once from core 0 (96–160 random-token prompts,
32 tokens out, `ignore_eos`), then the first request alone `--solo` times. Prints each
burst's first-token times sorted, beside what the `cpu` profile's planner predicts for the
same burst. First tokens that come back in groups, later groups later, mean the front end
admits requests one at a time and each engine step takes those admitted meanwhile
(docs/simulator.md, "The API server's front end").

    .venv/bin/python benchmarks/frontend_burst_vllm.py
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import tempfile
import time
from pathlib import Path

import httpx
from sim_fidelity import BASE_FLAGS, SERVER_CORE, engine_argv

from tuner.engine.ports import free_port
from tuner.engine.process import EngineProcess
from tuner.sim.planner import simulate
from tuner.tools.tinymodel import make_tiny_model

OUTPUT_TOKENS = 32
DEFAULTS = {"VLLM_CPU_KVCACHE_SPACE": 4}  # vLLM's CPU defaults otherwise: no batch flags


def prompts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [
        " ".join(str(rng.randrange(1000)) for _ in range(rng.randrange(96, 160))) for _ in range(n)
    ]


async def _one(client: httpx.AsyncClient, url: str, prompt: str) -> float:
    """Seconds from sending to the first streamed token."""
    body = {"model": "tiny", "prompt": prompt, "max_tokens": OUTPUT_TOKENS, "ignore_eos": True,
            "stream": True}  # fmt: skip
    sent = time.perf_counter()
    first = None
    async with client.stream("POST", f"{url}/v1/completions", json=body) as r:
        async for line in r.aiter_lines():
            if first is None and line.startswith("data:") and '"text"' in line:
                first = time.perf_counter()
    if first is None:
        raise RuntimeError("no token streamed")
    return first - sent


async def _burst(url: str, texts: list[str]) -> list[float]:
    async with httpx.AsyncClient(timeout=60) as client:
        return sorted(await asyncio.gather(*(_one(client, url, t) for t in texts)))


def simulated_ttfts_ms(model_dir: Path, lens: list[int], flags: dict) -> list[float]:
    from tuner.sim.profiles import load_model

    r = simulate(load_model(model_dir), "cpu", {**BASE_FLAGS, **DEFAULTS, **flags}, lens,
                 [OUTPUT_TOKENS] * len(lens), [0.0] * len(lens))  # fmt: skip
    return sorted(rec.ttft_s * 1e3 for rec in r.records)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--bursts", type=int, default=4)
    ap.add_argument("--solo", type=int, default=5)
    ap.add_argument("--block-size", type=int, default=BASE_FLAGS["block-size"])
    ap.add_argument("--no-warmup", action="store_true")
    args = ap.parse_args()
    os.sched_setaffinity(0, [0])
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        model_dir = make_tiny_model(tmp / "tiny")
        port = free_port()
        env = {"VLLM_CPU_KVCACHE_SPACE": "4", "VLLM_CPU_OMP_THREADS_BIND": str(SERVER_CORE),
               "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}  # fmt: skip
        flags = {"block-size": args.block_size}
        argv = engine_argv(model_dir, port, flags)
        proc = EngineProcess.start(argv, env, tmp / "engine.log", cpu_affinity=[SERVER_CORE])
        url = f"http://127.0.0.1:{port}"
        try:
            proc.wait_ready(url, 300)
            texts = prompts(args.requests, 0)
            if not args.no_warmup:
                asyncio.run(_burst(url, texts))
            for b in range(args.bursts):
                got = asyncio.run(_burst(url, texts))
                print(f"burst {b}, real TTFT ms sorted: {[round(t * 1e3) for t in got]}")
            solo = [asyncio.run(_burst(url, texts[:1]))[0] * 1e3 for _ in range(args.solo)]
            print(f"one request alone, real TTFT ms: {[round(t, 1) for t in solo]}")
        finally:
            proc.stop()
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(model_dir)
        lens = [len(tok(t)["input_ids"]) for t in texts]
        sim = simulated_ttfts_ms(model_dir, lens, flags)
        print(f"simulated (cpu profile) TTFT ms sorted: {[round(t) for t in sim]}")


if __name__ == "__main__":
    main()

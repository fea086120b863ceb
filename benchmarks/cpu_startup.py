"""The CPU start-up figure (`tuner.sim.boot.CPU_STARTUP_S`): launch to ready of the baseline
trial's engine of the CPU study (`tuner_testing.cpu_study` with the shipped file's 4 GiB KV
cache, which the tests' engines shrink to 1).

Each run builds the baseline trial's argv and env from the study file (`engine_argv`, the
search space's defaults), starts it pinned to the last core with `EngineProcess`, waits for
/v1/models, and stops it; the start-up is `wait_ready`'s `startup_s`, the figure a trial
records as `startup_s`. Runs are one at a time; the 1-minute load average before each run is
printed beside it, because the box is shared and the figure moves with the load.

With `--cache-pairs N` it measures what a study's shared vLLM cache (`VLLM_CACHE_ROOT`, one
per study since the tuner sets it; docs/engine.md) does to a start: a first start with an
empty cache root, then N pairs, interleaved so that both see the same load, of a start that
finds that root populated ("later", as every trial after a study's first) and a start with a
fresh empty root ("first"). vLLM logs at DEBUG, so each start also reports how long vLLM's
model inspection took (`Registry inspect model class`, the one thing this CPU build with
--enforce-eager caches: `<root>/modelinfos/`).

Usage: .venv/bin/python benchmarks/cpu_startup.py [--repeats N] [--pause-s S]
       .venv/bin/python benchmarks/cpu_startup.py --cache-pairs N
       .venv/bin/python benchmarks/cpu_startup.py --kv-cache-gib 1 4 --repeats N

With `--kv-cache-gib` it starts the baseline's engine at each KV cache size, interleaved, and
prints vLLM's own "init engine (profile, create kv cache, warmup model)" seconds beside the
start-up: this CPU build fills the whole cache as it starts.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import tempfile
import time
from pathlib import Path

from tuner.engine.ports import free_port
from tuner.engine.process import EngineProcess
from tuner.spec.space import engine_argv, engine_env
from tuner.spec.study import load_study_spec
from tuner.tools.tinymodel import make_tiny_model
from tuner_testing import cpu_study

REPO = Path(__file__).resolve().parent.parent
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
CORE = max(os.sched_getaffinity(0))


def run_once(
    spec, tmp: Path, cache_root: Path | None = None, **overrides: object
) -> tuple[float, float | None, float | None]:
    """One start of the baseline's engine (with `overrides` of its params): launch to ready,
    vLLM's model inspection seconds (when logged) and its "init engine" seconds."""
    params = {name: p.default for name, p in spec.search_space.parameters.items()} | overrides
    port = free_port()
    argv = engine_argv(spec, params, port=port)
    env = engine_env(spec, params)
    if cache_root is not None:
        env.update(VLLM_CACHE_ROOT=str(cache_root), VLLM_LOGGING_LEVEL="DEBUG")
    log = tmp / f"engine-{port}.log"
    proc = EngineProcess.start(argv, env, log, cpu_affinity=spec.engine.cpu_affinity)
    try:
        startup_s = proc.wait_ready(f"http://127.0.0.1:{port}", timeout_s=300).startup_s
    finally:
        proc.stop()
    text = log.read_text(errors="replace")
    found, init = INSPECT.search(text), INIT.search(text)
    return (
        startup_s,
        float(found.group(1)) if found else None,
        float(init.group(1)) if init else None,
    )


INSPECT = re.compile(r"Registry inspect model class: Elapsed time ([0-9.]+) secs")
INIT = re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([0-9.]+) s")


def spread(values: list[float | None], digits: int = 1) -> str:
    """'median M s (min A, max B)' of the logged values, or 'not logged'."""
    found = [v for v in values if v is not None]
    if not found:
        return "not logged"
    median, low, high = statistics.median(found), min(found), max(found)
    return f"median {median:.{digits}f} s (min {low:.{digits}f}, max {high:.{digits}f})"


def kv_sizes(spec, tmp: Path, sizes: list[int], repeats: int, pause_s: float) -> None:
    """The baseline's engine with each KV cache size (VLLM_CPU_KVCACHE_SPACE, GiB), the sizes
    interleaved `repeats` times: the CPU build fills its whole cache as it starts."""
    runs: dict[int, list[tuple[float, float | None]]] = {gib: [] for gib in sizes}
    for i in range(repeats):
        for gib in sizes:
            load_1m = os.getloadavg()[0]
            startup_s, _, init_s = run_once(spec, tmp, VLLM_CPU_KVCACHE_SPACE=gib)
            runs[gib].append((startup_s, init_s))
            shown = f"{init_s:.2f} s" if init_s is not None else "not logged"
            print(
                f"round {i + 1}, {gib} GiB: startup_s {startup_s:.1f}, init engine {shown} "
                f"(load 1m before: {load_1m:.2f})",
                flush=True,
            )
            time.sleep(pause_s)
    for gib, values in runs.items():
        print(
            f"== {gib} GiB ({len(values)} starts): startup_s {spread([a for a, _ in values])}; "
            f"init engine {spread([b for _, b in values], 2)}"
        )


def cache_pairs(spec, tmp: Path, pairs: int, pause_s: float) -> None:
    """A study's first start, then `pairs` × (a later start, a first start), interleaved."""
    shared = tmp / "study-cache"
    runs: dict[str, list[tuple[float, float | None]]] = {"first": [], "later": []}
    plan = ["first"] + ["later", "first"] * pairs
    for i, kind in enumerate(plan):
        root = shared if kind == "later" or i == 0 else tmp / f"fresh-{i}"
        load_1m = os.getloadavg()[0]
        startup_s, inspect_s, _ = run_once(spec, tmp, root)
        runs[kind].append((startup_s, inspect_s))
        shown = f"{inspect_s:.2f} s" if inspect_s is not None else "not logged"
        print(
            f"run {i + 1} ({kind} start): startup_s {startup_s:.1f}, model inspection {shown} "
            f"(load 1m before: {load_1m:.2f})",
            flush=True,
        )
        time.sleep(pause_s)
    for kind, values in runs.items():
        print(
            f"== {kind} starts ({len(values)}): startup_s {spread([s for s, _ in values])}; "
            f"model inspection {spread([x for _, x in values], 2)}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--pause-s", type=float, default=5.0, help="idle seconds between runs")
    parser.add_argument("--cache-pairs", type=int, help="first against later starts (see above)")
    parser.add_argument(
        "--kv-cache-gib", type=int, nargs="+", help="start-up at these KV cache sizes (GiB)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        model = make_tiny_model(tmp / "model")
        spec = load_study_spec(cpu_study(tmp, model, VLLM_PYTHON, CORE, kv_cache_gib=None))
        if args.kv_cache_gib:
            kv_sizes(spec, tmp, args.kv_cache_gib, args.repeats, args.pause_s)
            return
        if args.cache_pairs:
            cache_pairs(spec, tmp, args.cache_pairs, args.pause_s)
            return
        values = []
        for i in range(args.repeats):
            load_1m = os.getloadavg()[0]
            startup_s, _, _ = run_once(spec, tmp)
            values.append(startup_s)
            print(f"run {i + 1}: startup_s {startup_s:.1f} (load 1m before: {load_1m:.2f})")
            time.sleep(args.pause_s)
        print(f"== CPU start-up, {len(values)} runs on {os.cpu_count()} cores: {spread(values)}")


if __name__ == "__main__":
    main()

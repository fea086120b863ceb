"""An engine's start-up, phase by phase, as vLLM's own log lines tell it (docs/engine.md,
"Start-up phases").

vLLM 0.32 logs each phase of its start once it ends; the formats below are its own
(`logger.info` format strings, the file each is in named beside it). `parse_startup_phases`
reads them from a log's text: a pure function, the one reader. The simulated engine
(`tuner sim serve`) prints the same lines with `vllm_line`, so that a simulated trial shows
phases as a real one does.

A phase logged by several processes (one worker per GPU under tensor parallelism, each
prefixing its lines `(Worker_TP0 pid=12)`) counts once: the slowest process's figure, as the
processes run side by side. A compile logged per compile range (piecewise compilation) is the
sum of the ranges of each process.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable

# vLLM 0.32's format strings (a `%s` prefix such as "[backbone] " left out where it has one)
INITIALIZING = "Initializing model took %.6f seconds"  # model_executor/model_loader/base_loader.py
LOADING_WEIGHTS = "Loading weights took %.2f seconds"  # model_loader/default_loader.py
MODEL_LOADING = "Model loading took %s GiB memory and %.6f seconds"  # v1/worker/gpu_model_runner.py
COMPILED = "Compiling a graph for compile range %s takes %.2f s"  # compilation/backends.py
CACHED = (  # compilation/backends.py: the compile cache had the graph
    "Directly load the compiled graph(s) for compile range %s from the cache, took %.3f s"
)
AOT_CACHED = "Directly load AOT compilation from path %s"  # compilation/decorators.py
GRAPH_CAPTURE = "Graph capturing finished in %.0f secs, took %.2f GiB"  # gpu_model_runner.py
KV_CACHE_MEMORY = "Available KV cache memory: %s GiB"  # v1/worker/gpu_worker.py
KV_CACHE_SIZE = (  # v1/core/kv_cache_utils.py ("GPU", "CPU": the pool's device)
    "%s KV cache size: %s tokens, Maximum concurrency for %s tokens per request: %.2fx"
)
INIT_ENGINE = "init engine (profile, create kv cache, warmup model) took %.2f s"  # engine/core.py
INIT_ENGINE_COMPILED = (
    "init engine (profile, create kv cache, warmup model) took %.2f s (compilation: %.2f s)"
)

# The stored keys (`tuner.trial.payloads.StartupPhases`' fields), in seconds, GiB or tokens
MODEL_INIT_S = "model_init_s"  # the model built (its layers allocated), before its weights
LOADING_S = "loading_s"  # weights read into memory
MODEL_LOADING_S = "model_loading_s"  # the whole model load (weights and the model's set-up)
WEIGHTS_GIB = "weights_gib"  # the memory the model took
COMPILE_S = "compile_s"  # torch.compile, cold or from the compile cache
COMPILE_CACHED = "compile_cached"  # 1: loaded from the compile cache; 0: compiled cold
GRAPH_CAPTURE_S = "graph_capture_s"  # CUDA graph capture
GRAPH_CAPTURE_GIB = "graph_capture_gib"
KV_CACHE_GIB = "kv_cache_gib"
KV_CACHE_TOKENS = "kv_cache_tokens"
INIT_ENGINE_S = "init_engine_s"  # memory profiling, KV cache, compile, warm-up, graph capture

_NUMBER = r"([0-9][0-9,]*(?:\.[0-9]+)?)"


def _pattern(fmt: str) -> re.Pattern[str]:
    """A regex of a `%` format string: a number for each `%f`/`%d`, any text for a `%s`."""
    parts = re.split(r"(%\.?\d*[sfd])", fmt)
    out = [r"(.+?)" if p == "%s" else _NUMBER if p.startswith("%") else re.escape(p) for p in parts]
    return re.compile("".join(out))


_PROCESS = re.compile(r"^\((\S+) pid=(\d+)\)")


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _by_process(
    lines: list[str], fmt: str, group: int, fold: Callable[[list[float]], float]
) -> float | None:
    """`fold` of each process's figures (group `group` of `fmt`), the slowest process's."""
    regex = _pattern(fmt)
    seen: dict[str, list[float]] = defaultdict(list)
    for line in lines:
        found = regex.search(line)
        if found is None:
            continue
        process = _PROCESS.match(line)
        try:
            seen[process.group(0) if process else ""].append(_number(found.group(group)))
        except ValueError:
            continue
    return max(fold(v) for v in seen.values()) if seen else None


def parse_startup_phases(log_text: str) -> dict[str, float]:
    """The phases a vLLM log tells (keys above; a phase it does not log is left out)."""
    lines = log_text.splitlines()
    last: Callable[[list[float]], float] = lambda v: v[-1]  # noqa: E731
    out: dict[str, float | None] = {
        MODEL_INIT_S: _by_process(lines, INITIALIZING, 1, last),
        LOADING_S: _by_process(lines, LOADING_WEIGHTS, 1, last),
        WEIGHTS_GIB: _by_process(lines, MODEL_LOADING, 1, last),
        MODEL_LOADING_S: _by_process(lines, MODEL_LOADING, 2, last),
        GRAPH_CAPTURE_S: _by_process(lines, GRAPH_CAPTURE, 1, last),
        GRAPH_CAPTURE_GIB: _by_process(lines, GRAPH_CAPTURE, 2, last),
        KV_CACHE_GIB: _by_process(lines, KV_CACHE_MEMORY, 1, last),
        KV_CACHE_TOKENS: _by_process(lines, KV_CACHE_SIZE, 2, last),
        INIT_ENGINE_S: _by_process(lines, INIT_ENGINE, 1, last),
    }
    cold = _by_process(lines, COMPILED, 2, sum)
    cached = _by_process(lines, CACHED, 2, sum)
    aot = cold is None and any(_pattern(AOT_CACHED).search(line) for line in lines)
    engine_compile = _by_process(lines, INIT_ENGINE_COMPILED, 2, last)
    if cold is not None or cached is not None or aot:
        out[COMPILE_CACHED] = 0.0 if cold is not None else 1.0
        out[COMPILE_S] = engine_compile if engine_compile is not None else (cold or cached)
    return {k: v for k, v in out.items() if v is not None}


def vllm_line(fmt: str, *args: object) -> str:
    """A line in vLLM's words: `fmt` (one of the formats above) with its values."""
    return fmt % args

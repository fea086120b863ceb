"""The start-up phases read from vLLM's own log lines (`tuner.measure.startup_phases`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from results_fixtures import frozen

from tuner.measure import startup_phases as sp
from tuner.results.views import trials_frame, trials_records
from tuner.sim import boot
from tuner.sim.memory import memory_breakdown, resolve_flags
from tuner.sim.server import ServeOptions
from tuner.sim.startup import engine_setup, log_phases
from tuner.trial import read
from tuner.trial.payloads import StartupPhases

# Lines as vLLM 0.32 writes them: its format strings (vllm/model_executor/model_loader/
# default_loader.py, compilation/backends.py, v1/worker/gpu_model_runner.py, gpu_worker.py,
# v1/core/kv_cache_utils.py, v1/engine/core.py) with its logger's prefix.
_CORE = "(EngineCore_DP0 pid=2117) INFO 12-07 06:00:01 "
COLD = "".join(
    f"{_CORE}{line}\n"
    for line in [
        "[base_loader.py:82] Initializing model took 0.168131 seconds",
        "[default_loader.py:502] Loading weights took 12.34 seconds",
        "[gpu_model_runner.py:5150] Model loading took 15.27 GiB memory and 13.104512 seconds",
        "[backends.py:1167] Dynamo bytecode transform time: 6.01 s",
        "[backends.py:399] Compiling a graph for compile range (1, 8192) takes 21.52 s",
        "[monitor.py:70] torch.compile took 28.90 s in total",
        "[gpu_worker.py:760] Available KV cache memory: 54.32 GiB",
        "[kv_cache_utils.py:2328] GPU KV cache size: 1,017,008 tokens, "
        "Maximum concurrency for 4,096 tokens per request: 248.30x",
        "[gpu_model_runner.py:6582] Graph capturing finished in 18 secs, took 0.53 GiB",
        "[core.py:396] init engine (profile, create kv cache, warmup model) took 48.71 s "
        "(compilation: 28.90 s)",
    ]
)
CACHED = "".join(
    f"INFO 12-07 06:10:01 {line}\n"
    for line in [
        "[default_loader.py:502] Loading weights took 3.10 seconds",
        "[backends.py:296] Directly load the compiled graph(s) for compile range (1, 8192) "
        "from the cache, took 1.274 s",
        "[core.py:403] init engine (profile, create kv cache, warmup model) took 19.02 s",
    ]
)


def test_a_cold_start_read_phase_by_phase() -> None:
    found = sp.parse_startup_phases(COLD)
    assert found == {
        sp.MODEL_INIT_S: 0.168131,
        sp.LOADING_S: 12.34,
        sp.WEIGHTS_GIB: 15.27,
        sp.MODEL_LOADING_S: 13.104512,
        sp.COMPILE_S: 28.90,  # the engine's own total, not the one range
        sp.COMPILE_CACHED: 0.0,
        sp.GRAPH_CAPTURE_S: 18.0,
        sp.GRAPH_CAPTURE_GIB: 0.53,
        sp.KV_CACHE_GIB: 54.32,
        sp.KV_CACHE_TOKENS: 1017008.0,
        sp.INIT_ENGINE_S: 48.71,
    }


def test_a_compile_cache_hit_and_phases_not_logged_left_out() -> None:
    found = sp.parse_startup_phases(CACHED)
    assert found == {
        sp.LOADING_S: 3.10,
        sp.COMPILE_S: 1.274,
        sp.COMPILE_CACHED: 1.0,
        sp.INIT_ENGINE_S: 19.02,
    }
    assert sp.parse_startup_phases("INFO Starting vLLM API server\n") == {}


def test_tensor_parallel_workers_count_once_and_ranges_add_up() -> None:
    log = "".join(
        f"(Worker_TP{w} pid={10 + w}) INFO [backends.py:399] "
        f"Compiling a graph for compile range {r} takes {s:.2f} s\n"
        f"(Worker_TP{w} pid={10 + w}) INFO [default_loader.py:502] "
        f"Loading weights took {6.0 + w:.2f} seconds\n"
        for w in (0, 1)
        for r, s in (("(1, 2048)", 5.0 + w), ("(2049, 8192)", 4.0))
    )
    found = sp.parse_startup_phases(log)
    assert found[sp.COMPILE_S] == 10.0  # the slower worker: 6 + 4 s
    assert found[sp.LOADING_S] == 7.0
    assert found[sp.COMPILE_CACHED] == 0.0


def test_the_simulated_engine_writes_lines_the_parser_reads() -> None:
    log = "\n".join(
        [
            sp.vllm_line(sp.LOADING_WEIGHTS, 7.5),
            sp.vllm_line(sp.COMPILED, "(1, 2048)", 40.0),
            sp.vllm_line(sp.GRAPH_CAPTURE, 25.0, 0.5),
            sp.vllm_line(sp.KV_CACHE_SIZE, "GPU", f"{123456:,}", f"{4096:,}", 30.14),
        ]
    )
    found = sp.parse_startup_phases(log)
    assert found[sp.LOADING_S] == 7.5 and found[sp.COMPILE_S] == 40.0
    assert found[sp.COMPILE_CACHED] == 0.0 and found[sp.KV_CACHE_TOKENS] == 123456


def test_the_stored_payload_holds_every_key_and_old_trials_have_none() -> None:
    names = {f.name for f in dataclasses.fields(StartupPhases)}
    parsed = sp.parse_startup_phases(COLD)
    assert set(parsed) == names - {"compile_cached"} | {sp.COMPILE_CACHED}
    stored = StartupPhases.of(parsed)
    assert stored.compile_cached is False
    assert StartupPhases.decode(stored.encode()) == stored
    assert StartupPhases.decode({"loading_s": "soon", "compile_s": 3.0}) == StartupPhases(
        compile_s=3.0
    )
    assert stored.words() == "load 12.3 s, compile 28.9 s cold, graphs 18 s"


def test_a_real_cpu_engine_s_log_gives_what_it_has() -> None:
    """vLLM's CPU build, `--load-format dummy --enforce-eager` (the CPU study): lines copied
    from its log (7 Dec 2026): no weights loaded, no compile, no graphs."""
    log = (
        "(Worker pid=6664) INFO 12-07 06:13:25 [base_loader.py:82] Initializing model took "
        "0.168131 seconds\n"
        "(EngineCore pid=6334) INFO 12-07 06:13:28 [kv_cache_utils.py:2327] CPU KV cache size: "
        "2,097,152 tokens, Maximum concurrency for 1,024 tokens per request: 2048.00x\n"
        "(EngineCore pid=6334) INFO 12-07 06:13:30 [core.py:402] init engine (profile, create "
        "kv cache, warmup model) took 1.83 s\n"
    )
    found = sp.parse_startup_phases(log)
    assert found == {sp.MODEL_INIT_S: 0.168131, sp.KV_CACHE_TOKENS: 2097152, sp.INIT_ENGINE_S: 1.83}
    assert StartupPhases.of(found).words() == "model init 0.168 s"


def _simulated_start(flags: dict[str, object], capsys: pytest.CaptureFixture[str]) -> dict:
    opts = ServeOptions(**engine_setup("deepseek-r1-0528-qwen3-8b", "h100", flags),
                        served_model_names=["m"])  # fmt: skip
    cfg = resolve_flags(opts.model, opts.gpu, opts.flags)
    log_phases(opts, memory_breakdown(opts.model, opts.gpu, cfg), cfg.max_model_len)
    return sp.parse_startup_phases(capsys.readouterr().out)


def test_the_simulated_engine_compiles_a_config_cold_once_then_loads_it_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path))
    first = _simulated_start({"max-num-seqs": 64}, capsys)
    assert first[sp.COMPILE_CACHED] == 0.0 and first[sp.COMPILE_S] == boot.COLD_COMPILE_S
    assert first[sp.GRAPH_CAPTURE_S] == boot.GRAPH_CAPTURE_S
    assert first[sp.LOADING_S] > 0 and first[sp.KV_CACHE_TOKENS] > 0
    again = _simulated_start({"max-num-seqs": 64}, capsys)
    assert again[sp.COMPILE_CACHED] == 1.0 and again[sp.COMPILE_S] == boot.CACHED_COMPILE_S
    other = _simulated_start({"max-num-seqs": 32}, capsys)  # another config: its own compile
    assert other[sp.COMPILE_CACHED] == 0.0
    eager = _simulated_start({"enforce-eager": True}, capsys)
    assert sp.COMPILE_S not in eager and sp.GRAPH_CAPTURE_S not in eager


def test_tuner_trials_shows_the_phases_in_words_and_json_gives_every_figure() -> None:
    phases = {"loading_s": 8.19, "compile_s": 40.0, "compile_cached": False}
    points = [
        read(frozen(0, engine_s=100.0, startup_s=60.0, score=0.0, startup_phases=phases)),
        read(frozen(1, engine_s=90.0, startup_s=50.0, score=0.1)),  # stored before phases
    ]
    column = trials_frame(points)["startup_phases"].tolist()
    assert column[0] == "load 8.19 s, compile 40 s cold" and column[1] != column[1]  # NaN
    rows = trials_records(points)
    assert rows[0]["startup_phases"] == phases and rows[1]["startup_phases"] is None
    assert "startup_phases" not in trials_frame(points[1:])  # no trial has them: no column

"""`tuner sim serve` over real loopback HTTP: streaming, /metrics, refusals, faults, clients."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tuner.engine.ports import free_port
from tuner_testing import tuner, vllm_run
from tuner_testing.waiting import wait_for

REPO = Path(__file__).resolve().parent.parent
M32 = ["--model", "deepseek-r1-distill-qwen-32b", "--tensor-parallel-size", "4"]
SMALL = [*M32, "--max-model-len", "8192", "--served-model-name", "m32"]


def sim_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "tuner.cli", "sim", "serve", *args]


class Sim:
    def __init__(self, proc: subprocess.Popen, port: int) -> None:
        self.proc, self.port = proc, port
        self.url = f"http://127.0.0.1:{port}"


@contextmanager
def sim_server(
    *args: str, ready: bool = True, env: dict | None = None, log: Path | None = None
) -> Iterator[Sim]:
    """`tuner sim serve` on a free port (its log lines into `log`, if given)."""
    port = free_port()
    out = log.open("w") if log is not None else None
    proc = subprocess.Popen(
        sim_command(*args, "--port", str(port)),
        stdout=out or subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, **(env or {})},
        cwd=REPO,
    )
    sim = Sim(proc, port)
    try:
        if ready:
            wait_ready(sim)
        yield sim
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
        if out is not None:
            out.close()


def wait_ready(sim: Sim, timeout_s: float = 30.0) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        assert sim.proc.poll() is None, sim.proc.stderr.read()
        try:
            if httpx.get(f"{sim.url}/health", timeout=1).status_code == 200:
                return time.monotonic() - start
        except httpx.TransportError:
            time.sleep(0.05)
    raise AssertionError("sim server did not become ready")


def stream(sim: Sim, path: str, body: dict, timeout_s: float = 30.0) -> tuple[list, list]:
    """(data objects, arrival times) of one SSE response."""
    objs, times = [], []
    with httpx.stream("POST", sim.url + path, json=body, timeout=timeout_s) as resp:
        assert resp.status_code == 200, resp.read()
        for line in resp.iter_lines():
            if line.startswith("data: "):
                times.append(time.monotonic())
                objs.append(line[6:] if line == "data: [DONE]" else json.loads(line[6:]))
    return objs, times


def run_cli(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess:
    """`tuner sim serve ARGS` to its exit, forked from the tests' pre-imported tuner (the same
    exit code, stdout and stderr as a fresh start: tests/test_zygote.py)."""
    return tuner("sim", "serve", *args, cwd=REPO, timeout=timeout_s)


@pytest.mark.realtime  # checks the wall-clock pace of the tokens
def test_streams_completions_and_chat_at_simulated_speed(tiny_model_dir):
    with sim_server(*SMALL, "--tokenizer", str(tiny_model_dir)) as sim:
        body = {"model": "m32", "prompt": "tell me about the cache", "max_tokens": 40,
                "stream": True, "stream_options": {"include_usage": True},
                "ignore_eos": True}  # fmt: skip
        objs, times = stream(sim, "/v1/completions", body)
        assert objs[-1] == "[DONE]"
        usage = objs[-2]
        assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 40
        tokens = [o for o in objs[:-2] if o["choices"]]
        assert len(tokens) == 40 and tokens[-1]["choices"][0]["finish_reason"] == "length"
        assert all(o["choices"][0]["text"].strip() for o in tokens)  # real vocabulary words
        tpot_s = (times[39] - times[0]) / 39
        assert 0.025 < tpot_s < 0.08  # simulated ~33 ms on 4xA6000 (2x slack for this box)

        chat = {"model": "m32", "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 5, "stream": True}  # fmt: skip
        objs, _ = stream(sim, "/v1/chat/completions", chat)
        assert objs[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        assert [o["choices"][0]["delta"]["content"] != "" for o in objs[1:-1]] == [True] * 5

        full = httpx.post(f"{sim.url}/v1/completions", json={**body, "stream": False}).json()
        assert full["usage"]["completion_tokens"] == 40 and full["choices"][0]["text"]
        too_long = httpx.post(f"{sim.url}/v1/completions", json={**body, "max_tokens": 9000})
        assert too_long.status_code == 400
        assert "maximum context length is 8192" in too_long.json()["error"]["message"]
        negative = httpx.post(f"{sim.url}/v1/completions", json={**body, "max_tokens": -1})
        assert negative.status_code == 400 and "at least 1" in negative.text


@pytest.mark.realtime  # checks the wall-clock pace of the tokens
def test_the_api_servers_writing_paces_the_stream(tiny_model_dir, tmp_path):
    """With a cost per streamed chunk past the engine's step, the client reads tokens at the
    API server's pace, as `tuner plan` predicts them (`tuner.sim.frontend`)."""
    from tuner.sim.profile_file import profile_to_yaml
    from tuner.sim.profiles import GPUS

    slow = tmp_path / "slow-writer.yaml"
    slow.write_text(profile_to_yaml(GPUS["a6000"].with_constants(stream_chunk_s=0.08)))
    body = {"model": "m32", "prompt": "tell me", "max_tokens": 12, "stream": True,
            "ignore_eos": True}  # fmt: skip
    tpot_s = {}
    for gpu in ("a6000", str(slow)):
        with sim_server(*SMALL, "--gpu", gpu, "--tokenizer", str(tiny_model_dir)) as sim:
            _, times = stream(sim, "/v1/completions", body)
            tpot_s[gpu] = (times[11] - times[0]) / 11
    assert tpot_s["a6000"] < 0.06  # the engine's ~33 ms step
    assert tpot_s[str(slow)] == pytest.approx(0.08, rel=0.25)  # 80 ms to write each chunk


def test_metrics_show_the_queue_and_the_cache():
    with sim_server(*SMALL, "--max-num-seqs", "2") as sim:
        body = {"model": "m32", "prompt": "a b c d", "max_tokens": 60, "stream": True}
        threads = [threading.Thread(target=stream, args=(sim, "/v1/completions", body))
                   for _ in range(5)]  # fmt: skip
        for t in threads:
            t.start()

        def all_five_in() -> dict[str, float] | None:
            """/metrics once the engine holds all 5 requests (running or waiting)."""
            text = httpx.get(f"{sim.url}/metrics").text
            values = {
                line.split("{")[0]: float(line.rsplit(" ", 1)[1])
                for line in text.splitlines()
                if line.startswith("vllm:")
            }
            held = values["vllm:num_requests_running"] + values["vllm:num_requests_waiting"]
            return values if held + values["vllm:request_success_total"] == 5 else None

        values = wait_for(all_five_in, "the 5 requests reaching the engine", 10, interval_s=0.02)
        assert values["vllm:request_success_total"] == 0  # 60 tokens each: ~2 s to the first
        assert values["vllm:num_requests_running"] == 2
        assert values["vllm:num_requests_waiting"] == 3
        assert 0 < values["vllm:kv_cache_usage_perc"] < 1
        assert "vllm:num_preemptions_total" in values
        for t in threads:
            t.join()
        after = httpx.get(f"{sim.url}/metrics").text
        assert 'vllm:num_requests_running{engine="0",model_name="m32"} 0.0' in after


def test_the_server_counts_prefix_cache_tokens_in_vllms_metrics() -> None:
    """Over real HTTP: token-id prompts with a shared document hit the cache, and /metrics
    carries vLLM's counters; `--no-enable-prefix-caching` keeps them at 0 hits."""
    doc = list(range(100, 400))

    def counters(*flags: str) -> dict[str, float]:
        with sim_server(*SMALL, "--block-size", "16", *flags) as sim:
            for i in range(2):
                body = {"model": "m32", "prompt": doc + [7 + i] * 4, "max_tokens": 2}
                assert httpx.post(f"{sim.url}/v1/completions", json=body).status_code == 200
            text = httpx.get(f"{sim.url}/metrics").text
        return {
            line.split("{")[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("vllm:prefix_cache")
        }

    assert counters() == {
        "vllm:prefix_cache_queries_total": 608.0,
        "vllm:prefix_cache_hits_total": 288.0,  # 300 // 16 = 18 full blocks of the document
    }
    off = counters("--no-enable-prefix-caching")
    assert off["vllm:prefix_cache_hits_total"] == 0.0


def test_models_version_and_api_key():
    with sim_server(*SMALL, "--api-key", "s3cret") as sim:
        assert httpx.get(f"{sim.url}/v1/models").status_code == 401
        models = httpx.get(f"{sim.url}/v1/models", headers={"Authorization": "Bearer s3cret"})
        assert [m["id"] for m in models.json()["data"]] == ["m32"]
        assert httpx.get(f"{sim.url}/version").json()["version"].startswith("sim-")
        wrong = httpx.post(
            f"{sim.url}/v1/completions",
            json={"model": "other", "prompt": "x"},
            headers={"Authorization": "Bearer s3cret"},
        )
        assert wrong.status_code == 404


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--use-v2-block-manager"], "No such option: --use-v2-block-manager"),
        (["--max-num-seqs", "many"], "valid integer"),
        (["--gpu", "v100"], "unknown GPU 'v100'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, needle):
    done = run_cli(*M32, *args)
    assert done.returncode == 2
    assert needle in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_config_without_fields_is_exit_2(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8}))
    done = run_cli("--model", str(tmp_path))
    assert done.returncode == 2 and "lacks needed fields: num_hidden_layers" in done.stderr


def test_refused_configs_exit_1_with_vllms_message():
    done = run_cli(*M32, "--max-num-seqs", "512", "--max-num-batched-tokens", "256")
    assert done.returncode == 1
    assert "max_num_batched_tokens (256) must be greater than or equal to max_num_seqs (512)" in (
        done.stderr
    )
    done = run_cli(*M32, "--gpu-memory-utilization", "0.3", "--load-delay-s", "0.2")
    assert done.returncode == 1 and "No available memory for the cache blocks" in done.stderr
    done = run_cli("--model", "tiny-qwen2", "--gpu", "cpu", "--block-size", "16")
    assert done.returncode == 1 and "No common block size for 16" in done.stderr


def test_fault_refuse_start_and_slow_start(tmp_path):
    done = run_cli(*SMALL, "--fault-refuse-start", "--load-delay-s", "0.3")
    assert done.returncode == 1 and "Engine core initialization failed" in done.stderr
    log = tmp_path / "sim.log"
    with sim_server(*SMALL, "--fault-slow-start-s", "1.5", ready=False, log=log) as sim:
        # its last line before the (slow) model load: the port must stay closed from here
        wait_for(lambda: "CUDA_VISIBLE_DEVICES=" in log.read_text(), "the sim's start", 30)
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{sim.url}/health")
        assert wait_ready(sim) > 0.8


def test_fault_crash_after_breaks_streams_and_exits():
    with sim_server(*SMALL, "--fault-crash-after", "2") as sim:
        body = {"model": "m32", "prompt": "x y", "max_tokens": 500, "stream": True}
        outcomes = []

        def client():
            try:
                objs, _ = stream(sim, "/v1/completions", body)
                outcomes.append(objs[-1] == "[DONE]")
            except httpx.TransportError:
                outcomes.append(False)

        threads = [threading.Thread(target=client) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=10)
        assert sim.proc.wait(timeout=10) == 1
        assert outcomes == [False, False]
        assert "engine process crashed after 2 requests" in sim.proc.stderr.read()


def test_fault_hang_after_keeps_connections_open_without_tokens():
    with sim_server(*SMALL, "--fault-hang-after", "1") as sim:
        body = {"model": "m32", "prompt": "x y", "max_tokens": 500, "stream": True}
        with pytest.raises(httpx.ReadTimeout):
            stream(sim, "/v1/completions", body, timeout_s=1.5)
        assert httpx.get(f"{sim.url}/health").status_code == 200
        assert sim.proc.poll() is None


def test_fault_no_usage_streams_no_usage_chunk(tiny_model_dir):
    with sim_server(*SMALL, "--tokenizer", str(tiny_model_dir), "--fault-no-usage") as sim:
        body = {"model": "m32", "prompt": "x y", "max_tokens": 7, "stream": True,
                "stream_options": {"include_usage": True}}  # fmt: skip
        objs, _ = stream(sim, "/v1/completions", body)
        assert objs[-1] == "[DONE]" and len(objs) == 8
        assert all(o["choices"] and "usage" not in o for o in objs[:-1])


def test_tuner_bench_runs_unmodified_against_the_sim(tiny_model_dir, tmp_path):
    with sim_server(*SMALL, "--tokenizer", str(tiny_model_dir)) as sim:
        out = tmp_path / "result.json"
        done = tuner(
            "bench", "--base-url", sim.url, "--model", "m32",
            "--tokenizer", str(tiny_model_dir), "--dataset-name", "random",
            "--random-input-len", "64", "--random-output-len", "16", "--num-prompts", "20",
            "--request-rate", "inf", "--save-result", str(out),
            timeout=120, cwd=REPO,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        result = json.loads(out.read_text())
        assert result["completed"] == 20 and result["total_output_tokens"] == 320
        assert result["mean_tpot_ms"] > 20


@pytest.mark.vllm_env  # starts no vLLM server: not in the real-vLLM group
@pytest.mark.vllm
def test_vllm_bench_serve_runs_unmodified_against_the_sim(tiny_model_dir, tmp_path):
    vllm = REPO / ".venv-vllm" / "bin" / "vllm"
    if not vllm.exists():
        pytest.fail(f"{vllm} is missing: run `make vllm-env`")
    with sim_server(*SMALL, "--tokenizer", str(tiny_model_dir)) as sim:
        done = vllm_run(
            [str(vllm), "bench", "serve", "--backend", "vllm", "--base-url", sim.url,
             "--model", "m32", "--tokenizer", str(tiny_model_dir), "--dataset-name", "random",
             "--random-input-len", "64", "--random-output-len", "16", "--num-prompts", "20",
             "--ignore-eos", "--save-result", "--result-dir", str(tmp_path),
             "--result-filename", "r.json"],
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        result = json.loads((tmp_path / "r.json").read_text())
        assert result["completed"] == 20 and result["total_output_tokens"] == 320

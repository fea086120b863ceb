"""`tuner bench` as users run it: a process of its own per command.

The full report and the flag refusals run the real console script; the other commands are
forked from the tests' pre-imported tuner (`tuner_testing.tuner`: the same process without
its ~1.3 s of CPU of imports, tests/test_zygote.py). The server is
benchmarks/instant_server.py on a loopback port (real HTTP, real SSE).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tuner.engine.ports import free_port
from tuner_testing import loopback_app, tuner

REPO = Path(__file__).resolve().parent.parent
_SCRIPT = REPO / ".venv" / "bin" / "tuner"
# The console script; a git worktree without its own .venv runs the same entry point.
TUNER = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "tuner.cli"]


@pytest.fixture(scope="module")
def instant_url():
    yield from _serve([sys.executable, str(REPO / "benchmarks" / "instant_server.py")])


@pytest.fixture(scope="module")
def sim_url(tiny_model_dir):
    """`tuner sim serve` (the simulated 32B on 4×A6000, max-model-len 4096), real tokenizer."""
    model = ["--model", "deepseek-r1-distill-qwen-32b", "--tensor-parallel-size", "4"]
    rest = ["--max-model-len", "4096", "--tokenizer", str(tiny_model_dir)]
    yield from _serve([*TUNER, "sim", "serve", *model, *rest, "--served-model-name", "m32"])


def _serve(argv: list[str]):
    port = free_port()
    proc = subprocess.Popen(
        [*argv, "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx.get(url + "/health", timeout=1).raise_for_status()
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def _tuner(*args: str, console_script: bool = False) -> subprocess.CompletedProcess:
    """`tuner bench ARGS`: the console script itself, or forked (the module's docstring)."""
    if not console_script:
        return tuner("bench", *args, cwd=REPO, timeout=120)
    return subprocess.run(
        [*TUNER, "bench", *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_bench_prints_vllm_table_and_saves_vllm_keys(instant_url, tiny_model_dir, tmp_path):
    out = tmp_path / "result.json"
    proc = _tuner(
        "--base-url", instant_url,
        "--tokenizer", str(tiny_model_dir),
        "--num-prompts", "20",
        "--random-input-len", "40",
        "--random-output-len", "7",
        "--max-concurrency", "4",
        "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", "90,99.9",
        "--goodput", "ttft:10000", "tpot:1000",
        "--save-result", str(out),
        console_script=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    for line in (
        "============ Serving Benchmark Result ============",
        "Successful requests:                     20",
        "Failed requests:                         0",
        "Maximum request concurrency:             4",
        "Total generated tokens:                  140",
        "Request goodput (req/s):",
        "---------------Time to First Token----------------",
        "P99.9 TPOT (ms):",
        "P90 E2EL (ms):",
        "Bootstrap 95% CI",
    ):
        assert line in proc.stdout
    data = json.loads(out.read_text())
    assert data["completed"] == 20 and data["failed"] == 0
    assert data["total_output_tokens"] == 140
    assert data["request_throughput"] == pytest.approx(data["completed"] / data["duration"])
    assert data["request_goodput"] == pytest.approx(data["request_throughput"])
    assert data["max_concurrency"] == 4 and data["request_rate"] == "inf"
    for key in ("mean_ttft_ms", "median_itl_ms", "std_e2el_ms", "p99.9_tpot_ms", "p90_ttft_ms"):
        assert isinstance(data[key], float)
    for key in ("mean_tpot_ms_ci", "output_throughput_ci"):
        lo, hi = data[key]
        assert lo <= data[key.removesuffix("_ci")] <= hi
    assert "p99_ttft_ms_ci" not in data  # 99 was not among the percentiles asked
    assert "ttfts" not in data  # per-request lists only with --save-detailed


def test_bench_chat_endpoint_and_vllm_flag_spelling(instant_url, tiny_model_dir, tmp_path):
    out = tmp_path / "chat.json"
    proc = _tuner(
        "--base_url", instant_url,
        "--backend", "openai-chat",
        "--tokenizer", str(tiny_model_dir),
        "--num-prompts", "5",
        "--random-input-len", "16",
        "--random-output-len", "3",
        "--request-rate", "50",
        "--save-result", str(out),
        "--save-detailed",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["backend"] == "openai-chat" and data["completed"] == 5
    assert data["request_rate"] == 50.0
    assert data["output_lens"] == [3] * 5 and len(data["itls"]) == 5


def _assert_user_error(proc: subprocess.CompletedProcess, fragment: str) -> None:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("tuner: error: ") and fragment in lines[0]
    assert "Traceback" not in proc.stderr + proc.stdout


def test_request_rate_zero(tiny_model_dir):
    proc = _tuner("--tokenizer", str(tiny_model_dir), "--request-rate", "0", console_script=True)
    _assert_user_error(proc, "--request-rate")


def test_missing_dataset_file(tiny_model_dir, tmp_path):
    proc = _tuner(
        "--tokenizer", str(tiny_model_dir),
        "--dataset-name", "sharegpt",
        "--dataset-path", str(tmp_path / "missing.json"),
    )  # fmt: skip
    _assert_user_error(proc, "dataset file not found")


def test_malformed_json(tiny_model_dir, tmp_path):
    bad = tmp_path / "sharegpt.json"
    bad.write_text('[{"conversations": [\n  {"from": "human", "value": "hi"},,\n]}]')
    proc = _tuner(
        "--tokenizer", str(tiny_model_dir), "--dataset-name", "sharegpt", "--dataset-path", str(bad)
    )
    _assert_user_error(proc, "sharegpt.json: line 2: malformed JSON")


def test_malformed_jsonl_line(tiny_model_dir, tmp_path):
    bad = tmp_path / "docs.jsonl"
    bad.write_text('{"prompt": "one"}\n{"prompt": "two"}\n{"prompt": \n')
    proc = _tuner(
        "--tokenizer", str(tiny_model_dir), "--dataset-name", "jsonl", "--dataset-path", str(bad)
    )
    _assert_user_error(proc, "docs.jsonl:3: malformed JSON")


def test_missing_tokenizer_dir(tmp_path):
    proc = _tuner("--tokenizer", str(tmp_path / "no-such-dir"))
    _assert_user_error(proc, "tokenizer directory not found")


def test_unreachable_server(tiny_model_dir):
    proc = _tuner(
        "--base-url", f"http://127.0.0.1:{free_port()}",
        "--tokenizer", str(tiny_model_dir),
        "--num-prompts", "2",
        "--random-input-len", "8",
    )  # fmt: skip
    _assert_user_error(proc, "cannot reach the server")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--goodput", "ttft=5"], "--goodput: bad SLO"),
        (["--percentile-metrics", "ttft,latency"], "--percentile-metrics"),
        (["--metric-percentiles", "99,abc"], "--metric-percentiles"),
        (["--dataset-name", "alpaca"], "--dataset-name"),
        (["--endpoint", "/v1/embeddings"], "--endpoint"),
        (["--dataset-name", "longdoc", "--longdoc-lengths", "512,abc"], "--longdoc-lengths"),
        (["--dataset-name", "longdoc", "--longdoc-lengths", "512,0"], "--longdoc-lengths"),
        (["--dataset-name", "longdoc", "--longdoc-lengths", "-3"], "--longdoc-lengths"),
        (["--dataset-name", "longdoc", "--longdoc-weights", "1,2"], "--longdoc-weights"),
        (["--dataset-name", "longdoc", "--dataset-path", "x.json"], "--dataset-path"),
    ],
)
def test_bad_flags(tiny_model_dir, args, fragment):
    proc = _tuner("--tokenizer", str(tiny_model_dir), *args, console_script=True)
    _assert_user_error(proc, fragment)


def test_unknown_model_name(instant_url, tiny_model_dir):
    proc = _tuner(
        "--base-url", instant_url, "--tokenizer", str(tiny_model_dir), "--model", "gpt-9",
        "--num-prompts", "1", "--random-input-len", "8",
    )  # fmt: skip
    _assert_user_error(proc, "model 'gpt-9' is not served")


def test_model_to_request_picks_from_the_cards():
    """`tuner bench`'s model: the given one if served, else the first; a server with no model
    list is trusted with --model and refuses a run without one (no server needed)."""
    from tuner.errors import UserError
    from tuner.workload.probe import model_to_request

    url = "http://h:1"
    cards = [{"id": "a"}, {"id": "b"}]
    assert model_to_request(url, None, cards) == "a"
    assert model_to_request(url, "b", cards) == "b"
    assert model_to_request(url, "x", None) == "x"
    for model, given, fragment in [
        ("x", cards, "model 'x' is not served at http://h:1 (it serves: a, b)"),
        (None, [], "http://h:1 serves no model"),
        (None, None, "http://h:1 has no model list at /v1/models: give --model"),
    ]:
        with pytest.raises(UserError) as info:
            model_to_request(url, model, given)
        assert str(info.value) == fragment


async def _stream(request):
    from aiohttp import web

    body = await request.json()
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    n = body["max_tokens"]
    for i in range(n):
        choice = {"index": 0, "text": f" w{i}", "finish_reason": None}
        await resp.write(b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n")
    usage = {"prompt_tokens": 8, "completion_tokens": n, "total_tokens": 8 + n}
    await resp.write(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n")
    await resp.write(b"data: [DONE]\n\n")
    return resp


@pytest.fixture(params=["absent", "not-a-list"])
def no_models_url(request):
    """A loopback completions server whose /v1/models is missing (404) or not OpenAI's."""
    from aiohttp import web

    app = web.Application()
    app.router.add_post("/v1/completions", _stream)
    if request.param == "not-a-list":

        async def page(_request):
            return web.Response(text="<html>a gateway</html>", content_type="text/html")

        app.router.add_get("/v1/models", page)
    with loopback_app(app) as url:
        yield url


def test_server_without_model_list_warns_and_runs(no_models_url, tiny_model_dir):
    proc = _tuner(
        "--base-url", no_models_url, "--tokenizer", str(tiny_model_dir), "--model", "m",
        "--num-prompts", "3", "--random-input-len", "8", "--random-output-len", "4",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    warning = [line for line in proc.stderr.splitlines() if line.startswith("tuner: warning: ")]
    assert len(warning) == 1 and "/v1/models" in warning[0] and "'m'" in warning[0]
    assert "Traceback" not in proc.stderr
    assert "Successful requests:                     3" in proc.stdout
    assert "Total generated tokens:                  12" in proc.stdout


def test_server_without_model_list_needs_model(no_models_url, tiny_model_dir):
    proc = _tuner(
        "--base-url", no_models_url, "--tokenizer", str(tiny_model_dir),
        "--num-prompts", "1", "--random-input-len", "8",
    )  # fmt: skip
    _assert_user_error(proc, "give --model")


def test_bench_longdoc_against_the_simulated_engine(sim_url, tiny_model_dir, tmp_path):
    out = tmp_path / "longdoc.json"
    proc = _tuner(
        "--base-url", sim_url,
        "--tokenizer", str(tiny_model_dir),
        "--dataset-name", "longdoc",
        "--longdoc-lengths", "100,400,1500",
        "--longdoc-output-len", "8",
        "--num-prompts", "6",
        "--request-rate", "20",
        "--save-result", str(out),
        "--save-detailed",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["completed"] == 6 and data["failed"] == 0
    assert data["output_lens"] == [8] * 6
    assert set(data["input_lens"]) <= {100, 400, 1500} and len(set(data["input_lens"])) > 1
    # the server counted the same prompt tokens with its own copy of the tokenizer
    assert data["total_input_tokens"] == sum(data["input_lens"])


def test_bench_reports_the_engines_prefix_cache_hit_rate(sim_url, tiny_model_dir, tmp_path):
    """Documents asked 4 times: the engine's counters (here the simulator's) give the share of
    prompt tokens found in its prefix cache over the measured run, printed and saved."""
    out = tmp_path / "shared.json"
    proc = _tuner(
        "--base-url", sim_url,
        "--tokenizer", str(tiny_model_dir),
        "--dataset-name", "longdoc",
        "--longdoc-lengths", "700",
        "--longdoc-questions", "4",
        "--longdoc-output-len", "4",
        "--num-prompts", "8",
        "--request-rate", "2",
        "--save-result", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "Prefix cache hit rate (%):" in proc.stdout
    rate = json.loads(out.read_text())["prefix_cache_hit_rate"]
    # 3 of each document's 4 prompts reuse its ~688 leading tokens (43 blocks of 16): 74 %,
    # and the first prompt too, which the initial test request already sent: 86 % at most
    assert 0.6 < rate <= 0.87


def test_bench_longdoc_longer_than_the_servers_max_model_len_is_refused(sim_url, tiny_model_dir):
    proc = _tuner(
        "--base-url", sim_url,
        "--tokenizer", str(tiny_model_dir),
        "--dataset-name", "longdoc",
        "--longdoc-lengths", "200,4000",
        "--longdoc-output-len", "100",
        "--num-prompts", "2",
    )  # fmt: skip
    _assert_user_error(proc, "serves max-model-len 4096: a long document of 4000 tokens")
    assert "at most 3996 tokens" in proc.stderr

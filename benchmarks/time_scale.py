"""What `tuner sim serve --time-scale N` keeps: the same workload measured at N = 1 and at
higher N, for two configs whose gap a test relies on (tests/test_robustness_measured.py).

`tuner bench` against `tuner sim serve --time-scale N` (real processes, real HTTP), the
LOADED workload of that test: 16 prompts of ~2048 tokens at 2.2 req/s on the simulated
32B on 4×A6000, 32 output tokens, max-num-batched-tokens 1024 against vLLM's 2048. Every
figure is SIMULATED; the wall column is the bench command's own time.

    .venv/bin/python benchmarks/time_scale.py --scales 1 4 10
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

import httpx

from tuner.engine.ports import free_port
from tuner_testing import TUNER

REPO = Path(__file__).resolve().parent.parent
TOKENIZER = REPO / ".cache" / "tiny-qwen2"
ENGINE = ["--model", "deepseek-r1-distill-qwen-32b", "--tensor-parallel-size", "4"]
WORKLOAD = [
    "--random-input-len", "2048", "--random-output-len", "32", "--random-range-ratio", "0.2",
    "--num-prompts", "16", "--request-rate", "2.2", "--num-warmups", "1",
]  # fmt: skip


def measure(scale: float, mnbt: int, out: Path) -> dict[str, float]:
    port = free_port()
    argv = [*TUNER, "sim", "serve", *ENGINE, "--max-model-len", "8192", "--max-num-seqs", "64"]
    argv += ["--max-num-batched-tokens", str(mnbt), "--tokenizer", str(TOKENIZER)]
    argv += ["--served-model-name", "m", "--port", str(port), "--time-scale", str(scale)]
    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                httpx.get(url + "/health", timeout=1).raise_for_status()
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        result = out / f"r-{scale}-{mnbt}.json"
        t0 = time.monotonic()
        subprocess.run(
            [*TUNER, "bench", "--base-url", url, "--model", "m", "--tokenizer", str(TOKENIZER),
             *WORKLOAD, "--save-result", str(result)],
            check=True, capture_output=True,
        )  # fmt: skip
        wall_s = time.monotonic() - t0
    finally:
        server.terminate()
        server.wait(10)
    r = json.loads(result.read_text())
    return {"wall_s": wall_s, **{k: r[k] for k in ("duration", "p99_ttft_ms", "mean_tpot_ms")}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scales", type=float, nargs="+", default=[1.0, 4.0, 10.0])
    args = ap.parse_args()
    out = Path(tempfile.mkdtemp(prefix="tuner-time-scale-"))
    print("scale  mnbt  wall_s  duration_s  p99_ttft_ms  mean_tpot_ms  (SIMULATED)")
    for scale in args.scales:
        tpot = {}
        for mnbt in (1024, 2048):
            m = measure(scale, mnbt, out)
            tpot[mnbt] = m["mean_tpot_ms"]
            print(
                f"{scale:5g}  {mnbt:4d}  {m['wall_s']:6.1f}  {m['duration']:10.2f}  "
                f"{m['p99_ttft_ms']:11.0f}  {m['mean_tpot_ms']:12.1f}"
            )
        print(f"       mean TPOT ratio 1024/2048: {tpot[1024] / tpot[2048]:.2f}")


if __name__ == "__main__":
    main()

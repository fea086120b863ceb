"""The README's own `tuner export` line, read from README.md (not copied), run as written on a
small copy of the demo it names: the same study file and flags, a shorter night (2 trials of
6 prompts) on the simulated engine. It must write a `vllm serve` command under the README's
SLO, and exit 0 (a tuned config recommended) or 3 (vLLM's defaults: held back, or no tuned
config beat them), never 2 (a mistake: the README's example SLO met by no trial)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml

from tuner_testing import REPO, tuner

pytestmark = pytest.mark.slow  # a whole (short) study

DEMO = "studies/demo-sim.yaml"


def readme_line(prefix: str) -> list[str]:
    """The first command line of README.md's ```bash blocks that starts with `prefix`, as the
    shell splits it (its trailing comment dropped)."""
    in_block = False
    for line in (REPO / "README.md").read_text().splitlines():
        if line.startswith("```"):
            in_block = line.strip() == "```bash"
            continue
        if in_block and line.startswith(prefix):
            return shlex.split(line, comments=True)
    raise AssertionError(f"README.md has no command line starting {prefix!r}")


def _small_demo(cwd: Path, tokenizer: Path) -> None:
    """The demo's study file at the path the README names, under `cwd`: its engine, flags,
    workload shape, SLO and sampler, with 2 trials of 6 prompts and the plain sampler loop."""
    data = yaml.safe_load((REPO / DEMO).read_text())
    data["engine"]["flags"]["tokenizer"] = data["workload"]["tokenizer"] = str(tokenizer)
    data["engine"]["flags"]["load-delay-s"] = 0
    data["search_space"] = str(REPO / "search_spaces" / "vllm-core.yaml")
    data["workload"]["num_prompts"] = 6
    data["budget"]["n_trials"] = 2
    data.pop("search")  # the multi-fidelity screen: its own test (test_run_multi_fidelity)
    (cwd / "studies").mkdir()
    (cwd / DEMO).write_text(yaml.safe_dump(data, sort_keys=False))


def test_the_readmes_export_line_runs_on_the_demo(tmp_path: Path, tiny_model_dir: Path) -> None:
    argv = readme_line(f"tuner export {DEMO} --slo ")
    slo = argv[argv.index("--slo") + 1]
    _small_demo(tmp_path, tiny_model_dir)
    ran = tuner("run", DEMO, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr[-2000:]

    done = tuner(*argv[1:], cwd=tmp_path)
    assert done.returncode in (0, 3), done.stderr  # 2: no trial meets the README's SLO
    out = done.stdout
    assert f"# SLO: {slo.replace(',', ', ')} (given with --slo, in place of the study's)" in out
    command = [line for line in out.splitlines() if not line.startswith("#")]
    assert command[0] == "vllm serve deepseek-ai/DeepSeek-R1-Distill-Qwen-32B \\", out
    assert "tokenizer" not in out.split("vllm serve", 1)[1]  # export_drop_flags
    assert "PREDICTED" in out  # a simulated study says so
    if done.returncode == 3:  # vLLM's defaults written, and the reason why on stderr
        assert "exit code 3" in done.stderr and "vLLM's defaults" in done.stderr, done.stderr
        assert "--max-num-batched-tokens 2048" in out  # the defaults' own value
    else:
        assert "CLEARLY better than vLLM's defaults" in out, out

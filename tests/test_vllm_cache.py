"""Every trial of a study starts its vLLM with one cache directory (`VLLM_CACHE_ROOT`, beside
the study's logs), so a later start reads what the first one wrote.

On this CPU build with `--enforce-eager` nothing is compiled, so the one thing vLLM caches is
its model inspection (`vllm/model_executor/models/registry.py`: the architecture's
`_ModelInfo`, found in a subprocess on a miss and written to `<root>/modelinfos/`). The test
checks exactly that, from vLLM's own debug log: the first start misses and writes the file,
the second reads it. Two real starts (about a minute each here).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tuner.runners.engine_runner import CACHE_DIR
from tuner.testing import cpu_study, tuner

MODEL_INFO = "vllm.model_executor.models.qwen2.Qwen2ForCausalLM"


def test_the_second_start_of_a_study_reads_the_cache_of_the_first(
    tmp_path: Path, tiny_model_dir: Path, vllm_python: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from conftest import server_core

    monkeypatch.delenv("VLLM_CACHE_ROOT", raising=False)  # the tuner sets it: none of ours
    study = cpu_study(tmp_path, tiny_model_dir, vllm_python, server_core())
    data = yaml.safe_load(study.read_text())
    data["engine"]["env"]["VLLM_LOGGING_LEVEL"] = "DEBUG"  # the cache's words are debug lines
    data["workload"].update(num_prompts=4, num_warmups=0)
    # one config, vLLM's defaults, twice: both launched (no rule or precheck may refuse it)
    data["search_space"] = {
        "parameters": {"max-num-seqs": {"type": "categorical", "choices": [128], "default": 128}}
    }
    data["trial"]["repeat_measured"] = True  # the same config twice is launched twice
    study.write_text(yaml.safe_dump(data, sort_keys=False))

    run = tuner("run", str(study), "--n-trials", "2", cwd=tmp_path, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    logs = sorted((tmp_path / "runs").glob("*/trial-*.log"))
    numbers = [int(re.search(r"trial-(\d+)", p.name).group(1)) for p in logs]
    assert numbers == [0, 1], (numbers, run.stderr[-2000:])
    cache = logs[0].parent / CACHE_DIR  # beside the study's logs, one for both trials
    written = cache / "modelinfos" / (MODEL_INFO.replace(".", "-") + ".json")
    assert written.is_file()

    first, second = (p.read_text(errors="replace") for p in logs)
    assert f"Cached model info file for class {MODEL_INFO} not found" in first
    assert f"Loaded model info for class {MODEL_INFO} from cache" in second
    assert f"Cached model info file for class {MODEL_INFO} not found" not in second

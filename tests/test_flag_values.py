"""vLLM's numeric flags checked as numbers when the study file is read (issue 33): a value the
tuner computes with or hands to `vllm serve` that is no number of the flag's kind is one
line, exit 2, nothing written, from `check`, `plan` and `run`; an integral flag written as a
float is an int (exported `4`, not `4.0`, which vLLM's `type=int` refuses)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from tuner.spec.flag_values import AUTO_MAX_MODEL_LEN, flag_value
from tuner.spec.space import max_model_len, serve_argv, serve_config, tuned_flags
from tuner.spec.study import StudySpec, load_study_spec
from tuner_testing import sim_study, tuner

TP = {"type": "categorical", "choices": [1, 2, 4], "default": 4}


def _spec(space: dict[str, Any] | None = None, **flags: Any) -> StudySpec:
    return StudySpec.model_validate(
        {
            "name": "s",
            "engine": {"model": "deepseek-r1-distill-qwen-32b", "flags": flags},
            "hardware": {"gpu": "a6000", "count": 4},
            "search_space": space or {"parameters": {"tensor-parallel-size": TP}},
            "workload": {"num_prompts": 4},
        }
    )


def test_an_integral_flag_written_as_a_float_is_exported_as_an_int() -> None:
    spec = _spec({"parameters": {"max-num-seqs": TP}}, **{"tensor-parallel-size": 4.0})
    assert spec.engine.flags["tensor-parallel-size"] == 4
    assert type(spec.engine.flags["tensor-parallel-size"]) is int
    argv = serve_argv(spec, {"max-num-seqs": 4})
    assert argv[argv.index("--tensor-parallel-size") + 1] == "4"
    assert serve_config(spec, {"max-num-seqs": 4})["tensor-parallel-size"] == 4
    # choices and default written as floats are ints too
    space = {
        "parameters": {"tensor-parallel-size": {**TP, "choices": [1, 2.0, 4.0], "default": 4.0}}
    }
    p = _spec(space).search_space.parameters["tensor-parallel-size"]
    assert p.choices == [1, 2, 4] and all(type(c) is int for c in p.choices)
    assert type(p.default) is int
    # a trial stored by an older tuner with the choice 2.0 exports as 2
    assert tuned_flags(_spec().search_space, {"tensor-parallel-size": 2.0}) == {
        "tensor-parallel-size": 2
    }


def test_vllm_s_own_ways_of_writing_numbers_load() -> None:
    """vLLM's `human_readable_int` sizes (vllm/utils/argparse_utils.py) and
    `--max-model-len auto`: as vLLM reads them."""
    assert flag_value("max-num-batched-tokens", "32k") == 32_000
    assert flag_value("max-num-batched-tokens", "2K") == 2048
    assert flag_value("max-model-len", "25.6k") == 25_600
    assert flag_value("max-num-seqs", "64") == 64
    assert flag_value("gpu-memory-utilization", "0.9") == 0.9
    assert flag_value("dtype", "bfloat16") == "bfloat16"  # not a numeric flag: as written
    auto = _spec(**{"max-model-len": "auto"})
    assert auto.engine.flags["max-model-len"] == AUTO_MAX_MODEL_LEN
    assert max_model_len(auto) is None  # the built-in model has no local config.json


@pytest.mark.parametrize(
    ("flags", "space", "needle"),
    [
        ({"tensor-parallel-size": 0}, None, "--tensor-parallel-size takes at least 1, not 0"),
        ({"max-num-seqs": "abc"}, None, "--max-num-seqs takes a whole number, not 'abc'"),
        ({"gpu-memory-utilization": 0}, None, "--gpu-memory-utilization takes more than 0"),
        ({"tensor-parallel-size": 2.5}, None, "takes a whole number, not 2.5"),
        ({"max-num-batched-tokens": "1.5K"}, None, "takes a whole number, not '1.5K'"),
        ({"tensor-parallel-size": True}, None, "takes a whole number, not True"),
        ({}, {"tensor-parallel-size": {**TP, "choices": [1, "two"], "default": 1}},
         "tensor-parallel-size: --tensor-parallel-size takes a whole number, not 'two'"),
        ({}, {"max-num-seqs": {"type": "categorical", "choices": [8, "abc"], "default": 8}},
         "--max-num-seqs takes a whole number, not 'abc'"),
        ({}, {"tensor-parallel-size": {"type": "int", "low": 0, "high": 4}},
         "--tensor-parallel-size takes at least 1, not 0.0"),
        ({}, {"tensor-parallel-size": {"type": "float", "low": 1, "high": 4}},
         "give the parameter type int or categorical"),
        ({}, {"max-num-seqs": {"type": "bool"}}, "a bool parameter would pass true or false"),
        ({}, {"tensor-parallel-size": {**TP, "choices": [2, 2.0], "default": 2}},
         "repeat a value as vLLM reads them"),
    ],
)  # fmt: skip
def test_a_numeric_flag_that_is_no_number_is_refused_at_load(
    tmp_path: Path, flags: dict, space: dict | None, needle: str
) -> None:
    data = _spec().model_dump(exclude={"file_contents"})
    data["engine"]["flags"] = flags
    if space is not None:
        data["search_space"] = {"parameters": space}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(Exception) as err:  # UserError: one line naming file and field
        load_study_spec(path)
    assert type(err.value).__name__ == "UserError"
    text = str(err.value)
    assert needle in text and str(path) in text and "\n" not in text, text


def _study(tmp_path: Path, tiny_model_dir: Path, *, flags=None, space=None) -> Path:
    study = sim_study(tmp_path, tiny_model_dir, flags=flags)
    if space is not None:
        data = yaml.safe_load(study.read_text())
        data["search_space"]["parameters"].update(space)
        study.write_text(yaml.safe_dump(data, sort_keys=False))
    return study


@pytest.mark.parametrize(
    ("flags", "space", "needle"),
    [
        ({"tensor-parallel-size": 0}, None, "--tensor-parallel-size takes at least 1, not 0"),
        (None, {"tensor-parallel-size": {**TP, "choices": [1, "two"], "default": 1}},
         "--tensor-parallel-size takes a whole number, not 'two'"),
        (None, {"max-num-seqs": {"type": "categorical", "choices": [8, "abc"], "default": 8}},
         "--max-num-seqs takes a whole number, not 'abc'"),
    ],
)  # fmt: skip
def test_check_plan_and_run_refuse_them_in_one_line_and_write_nothing(
    tmp_path: Path, tiny_model_dir: Path, flags: dict | None, space: dict | None, needle: str
) -> None:
    """Each used to load, and then `plan` and `run` died with a ValueError or
    ZeroDivisionError traceback (again on every resume)."""
    study = _study(tmp_path, tiny_model_dir, flags=flags, space=space)
    before = set(tmp_path.iterdir())
    for command in ("check", "plan", "run"):
        proc = tuner(command, str(study), cwd=tmp_path, timeout=120, env=dict(os.environ))
        assert proc.returncode == 2, (command, proc.stderr)
        assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
        assert needle in proc.stderr, proc.stderr
        assert set(tmp_path.iterdir()) == before, f"{command} wrote something"

"""Inputs that are refused at load time (docs/reliability.md, "Inputs that are refused").

Each used to pass validation and crash later, some after a whole trial. Each is now one
line naming the file and the field (or, for `tuner run`'s own checks, the setting), exit 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tuner.errors import UserError
from tuner.run.checks import check_run_storage, check_workload_files, run_checks
from tuner.spec.study import StudySpec, load_study_spec
from tuner.spec.workload import MAX_PROMPTS, MAX_WARMUPS, WorkloadSpec
from tuner_testing import tuner

SPACE = {"parameters": {"max-num-seqs": {"type": "int", "low": 8, "high": 64}}}


def check_run(spec: StudySpec, storage: str | None) -> None:
    """What `tuner run` refuses, the first problem raised (preflight collects them all)."""
    for check in run_checks(spec, storage):
        check()
    check_workload_files(spec)


def _write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _data(**sections) -> dict:
    data = {"name": "t", "engine": {"model": "m"}, "search_space": SPACE, "workload": {}}
    for key, value in sections.items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
    return data


def _refused(tmp_path: Path, needle: str, data: dict | None = None, text: str | None = None):
    path = tmp_path / "study.yaml"
    if text is not None:
        path.write_text(text)
    else:
        _write(tmp_path, data or _data())
    with pytest.raises(UserError) as err:
        load_study_spec(path)
    message = str(err.value)
    assert needle in message, message
    assert "\n" not in message and str(path) in message
    return message


def _param(**spec) -> dict:
    return {"parameters": {"x": spec}}


def _run(tmp_path: Path, study: Path, *args: str, env: dict | None = None):
    """`tuner run STUDY ARGS`, forked from the tests' pre-imported tuner (tuner_testing.tuner)."""
    import os

    return tuner(
        "run", str(study), *args, timeout=120, cwd=tmp_path, env={**os.environ, **(env or {})}
    )


# 1. Env names ------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["X$(touch pwned)", "X;id", "1X", "A B", "", "X-Y"])
def test_env_name_with_command_substitution_is_refused(tmp_path: Path, name: str) -> None:
    _refused(tmp_path, "engine.env: env name", _data(engine={"env": {name: "1"}}))
    space = _param(type="int", low=1, high=2, env=name)
    _refused(tmp_path, "is not a POSIX name", _data(search_space=space))


def test_env_name_with_equals_sign_is_refused(tmp_path: Path) -> None:
    _refused(tmp_path, "'A=B' is not a POSIX name", _data(engine={"env": {"A=B": "1"}}))


def test_vllm_api_key_in_engine_env_is_refused(tmp_path: Path) -> None:
    msg = _refused(tmp_path, "engine.env", _data(engine={"env": {"VLLM_API_KEY": "k"}}))
    assert "engine.api_key_env" in msg
    space = _param(type="categorical", choices=["a"], env="VLLM_API_KEY")
    _refused(tmp_path, "engine.api_key_env", _data(search_space=space))


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ({"engine": {"env": {"A": "x\0y"}}}, "engine.env.A"),
        ({"engine": {"flags": {"chat-template": "a\0b"}}}, "engine.flags.chat-template"),
        ({"engine": {"command": ["vllm\0", "serve"]}}, "engine.command.0"),
        ({"engine": {"model": "m\0"}}, "engine.model"),
        ({"search_space": _param(type="categorical", choices=["a", "b\0"])}, "choices.1"),
    ],
)
def test_nul_in_env_value_or_argv_flag_is_refused(tmp_path: Path, section, field) -> None:
    _refused(tmp_path, f"{field}: contains a NUL character", _data(**section))


# 2. Workload fields that crashed after a trial -------------------------------------------


@pytest.mark.parametrize(
    ("value", "needle"),
    [("abc", "'abc' is not a number"), ("101", "outside 0..100"), ("-1", "outside 0..100"),
     ("nan", "outside 0..100"), ("99,", None), ("", "at least one percentile")],
)  # fmt: skip
def test_bad_metric_percentiles_are_refused(tmp_path: Path, value: str, needle) -> None:
    data = _data(workload={"metric_percentiles": value})
    if needle is None:  # a trailing comma is fine
        assert load_study_spec(_write(tmp_path, data)).workload.percentiles == [99.0]
    else:
        assert needle in _refused(tmp_path, "workload.metric_percentiles: ", data)


def test_unknown_percentile_metric_is_refused(tmp_path: Path) -> None:
    data = _data(workload={"percentile_metrics": "ttft,latency"})
    _refused(tmp_path, "workload.percentile_metrics: unknown metric 'latency'", data)


@pytest.mark.parametrize(
    ("workload", "objective", "needle"),
    [
        ({"metric_percentiles": "90"}, {}, "objective.weights: p99_ttft_ms is not measured"),
        (
            {"percentile_metrics": "ttft"},
            {"weights": {"p99_ttft_ms": 1}, "slo": ["p99_e2el_ms<=900"]},
            "objective.slo: p99_e2el_ms is not measured: workload.percentile_metrics lacks e2el",
        ),
        ({}, {"weights": {"request_goodput": 1}}, "sets no goodput"),
    ],
)
def test_objective_metric_the_workload_never_measures_is_refused(
    tmp_path: Path, workload, objective, needle
) -> None:
    _refused(tmp_path, needle, _data(workload=workload, objective=objective))


# Engine command and host -----------------------------------------------------------------


@pytest.mark.parametrize("part", ["{foo}", "{", "}", "x{model", "{model!r}", "{model:>9}", "{}"])
def test_engine_command_braces_other_than_model_and_python_are_refused(
    tmp_path: Path, part: str
) -> None:
    _refused(tmp_path, "engine.command: ", _data(engine={"command": ["vllm", part]}))


def test_engine_command_literal_braces_and_placeholders_still_load(tmp_path: Path) -> None:
    command = ["{python}", "-m", "x", "{model}", "--json={{}}"]
    spec = load_study_spec(_write(tmp_path, _data(engine={"command": command})))
    assert spec.engine.command == command


@pytest.mark.parametrize("host", ["a b", "-x", "x-", "::1", "host:80", "a..b", "x" * 254, ""])
def test_engine_host_not_an_ip_address_or_hostname_is_refused(tmp_path: Path, host) -> None:
    _refused(tmp_path, "engine.host: ", _data(engine={"host": host}))


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0", "localhost", "gpu-01.example.com"])
def test_engine_host_ip_address_or_hostname_loads(tmp_path: Path, host: str) -> None:
    assert load_study_spec(_write(tmp_path, _data(engine={"host": host}))).engine.host == host


def test_study_name_over_128_characters_is_refused(tmp_path: Path) -> None:
    assert load_study_spec(_write(tmp_path, _data(name="n" * 128))).name == "n" * 128
    _refused(tmp_path, "name: study name is 129 characters long", _data(name="n" * 129))


# Steps, non-finite numbers, integer ranges ---------------------------------------------------


@pytest.mark.parametrize("step", [0, -0.1])
def test_float_step_not_positive_is_refused(tmp_path: Path, step: float) -> None:
    space = _param(type="float", low=0.1, high=0.9, step=step)
    _refused(tmp_path, "step must be > 0", _data(search_space=space))


@pytest.mark.parametrize(("step", "needle"), [(0.5, "whole number"), (0, "positive integer")])
def test_int_step_not_a_positive_integer_is_refused(tmp_path: Path, step, needle) -> None:
    space = _param(type="int", low=1, high=9, step=step)
    _refused(tmp_path, needle, _data(search_space=space))
    _refused(
        tmp_path,
        "low must be a whole number",
        _data(search_space=_param(type="int", low=1.5, high=9)),
    )


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ({"search_space": _param(type="float", low=float("nan"), high=1)}, "parameters.x.low"),
        ({"search_space": _param(type="float", low=0, high=float("inf"))}, "parameters.x.high"),
        ({"objective": {"weights": {"p99_ttft_ms": float("nan")}}}, "objective.weights"),
        ({"objective": {"weights": {"p99_ttft_ms": float("inf")}}}, "objective.weights"),
        ({"hardware": {"gpu_memory_gib": float("inf")}}, "hardware.gpu_memory_gib"),
        ({"hardware": {"gpu_memory_gib": float("nan")}}, "hardware.gpu_memory_gib"),
        ({"workload": {"request_timeout_s": float("inf")}}, "workload.request_timeout_s"),
        ({"workload": {"goodput": {"ttft": float("nan")}}}, "workload.goodput"),
        ({"objective": {"slo": ["p99_ttft_ms<=1e999"]}}, "objective.slo"),
    ],
)
def test_non_finite_numbers_are_refused(tmp_path: Path, section, field) -> None:
    _refused(tmp_path, field, _data(**section))


def test_infinite_request_rate_still_means_all_at_once(tmp_path: Path) -> None:
    spec = load_study_spec(_write(tmp_path, _data(workload={"request_rate": float("inf")})))
    assert spec.workload.request_rate == float("inf")


@pytest.mark.parametrize(
    ("yaml_line", "field"),
    [
        ("sampler: {seed: -1}", "sampler.seed"),
        ("sampler: {seed: 4294967296}", "sampler.seed"),
        ("budget: {n_trials: 1e30}", "budget.n_trials"),
        ("budget: {n_trials: 1.0e+30}", "budget.n_trials"),
        ("budget: {n_trials: 1000000}", "budget.n_trials"),
        ("hardware: {count: 100000}", "hardware.count"),
        ("trial: {confirm_repeats: 1000}", "trial.confirm_repeats"),
        ("engine: {model: m, cpu_affinity: [-1]}", "engine.cpu_affinity.0"),
    ],
)
def test_out_of_range_integers_are_refused(tmp_path: Path, yaml_line: str, field: str) -> None:
    base = (
        "name: t\nengine: {model: m}\nsearch_space: {parameters: {a: {type: bool}}}\nworkload: {}\n"
    )
    key = yaml_line.split(":")[0]
    text = "\n".join(line for line in base.splitlines() if not line.startswith(key + ":"))
    _refused(tmp_path, f"{field}: ", text=text + "\n" + yaml_line + "\n")


def test_workload_seed_out_of_range_is_refused(tmp_path: Path) -> None:
    _refused(tmp_path, "workload.seed", _data(workload={"seed": -1}))
    _refused(tmp_path, "workload.seed", _data(workload={"seed": 2**32}))


# Resource limits ---------------------------------------------------------------------------


def test_deeply_nested_yaml_is_refused_without_recursion_error(tmp_path: Path) -> None:
    text = "name: t\ndescription: " + "[" * 10_000 + "]" * 10_000 + "\n"
    _refused(tmp_path, "nested deeper than 64 levels", text=text)
    block = "name: t\ndescription:\n" + "".join("  " * i + "-\n" for i in range(1, 5000))
    _refused(tmp_path, "nested deeper than 64 levels", text=block)


@pytest.mark.parametrize(
    ("workload", "field"),
    [
        ({"num_prompts": MAX_PROMPTS + 1}, "workload.num_prompts"),
        ({"random_input_len": 2**20 + 1}, "workload.random_input_len"),
        ({"random_output_len": 2**20 + 1}, "workload.random_output_len"),
        ({"num_warmups": MAX_WARMUPS + 1}, "workload.num_warmups"),
        ({"num_prompts": MAX_PROMPTS, "random_input_len": 1024}, "at most 268435456"),
        ({"max_concurrency": 10**9}, "workload.max_concurrency"),
    ],
)
def test_sizes_that_cannot_fit_in_memory_are_refused(tmp_path: Path, workload, field) -> None:
    _refused(tmp_path, field, _data(workload=workload))


def test_duplicate_yaml_keys_are_refused(tmp_path: Path) -> None:
    text = "name: t\nengine: {model: m}\nname: u\n"
    _refused(tmp_path, "line 3 invalid YAML: duplicate key 'name'", text=text)
    nested = "name: t\nengine:\n  model: m\n  flags: {block-size: 16, block-size: 32}\n"
    _refused(tmp_path, "duplicate key 'block-size'", text=nested)
    (tmp_path / "s.yaml").write_text("parameters:\n  a: {type: bool}\n  a: {type: bool}\n")
    data = json.dumps(_data(search_space="s.yaml"))  # JSON is YAML
    with pytest.raises(UserError, match=r"s\.yaml: line 3 invalid YAML: duplicate key 'a'"):
        load_study_spec(_write_text(tmp_path, data))


def _write_text(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(text)
    return path


def test_yaml_merge_keys_may_still_be_overridden(tmp_path: Path) -> None:
    text = (
        "name: t\nengine: &e {model: m, host: 127.0.0.1}\n"
        "search_space: {parameters: {a: {type: bool}}}\nworkload: {}\n"
        "trial: {stall_timeout_s: 5}\n"
    )
    text = text.replace(
        "engine: &e {model: m, host: 127.0.0.1}", "engine: {<<: {model: m}, model: n}"
    )
    assert load_study_spec(_write_text(tmp_path, text)).engine.model == "n"


# `tuner run`'s own checks ------------------------------------------------------------------


def test_api_key_env_unset_is_refused_by_run_not_by_readers(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("TUNER_TEST_KEY", raising=False)
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    engine = {"api_key_env": "TUNER_TEST_KEY"}
    (tmp_path / "tokenizer.json").write_text("{}")  # a tokenizer directory, as run checks
    study = _write(tmp_path, _data(engine=engine, workload={"tokenizer": str(tmp_path)}))
    spec = load_study_spec(study)  # readers (trials, best, report) load it fine
    url = f"sqlite:///{tmp_path}/t.db"
    with pytest.raises(
        UserError, match=r"engine\.api_key_env: the environment variable TUNER_TEST_KEY is not set"
    ):
        check_run(spec, url)
    monkeypatch.setenv("TUNER_TEST_KEY", "")
    with pytest.raises(UserError, match="not set \\(or is empty\\)"):
        check_run(spec, url)
    monkeypatch.setenv("TUNER_TEST_KEY", "secret")
    check_run(spec, url)


def test_vllm_api_key_inherited_without_api_key_env_is_refused_by_run(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("VLLM_API_KEY", "secret")
    spec = load_study_spec(_write(tmp_path, _data()))
    with pytest.raises(UserError, match=r"set engine\.api_key_env: VLLM_API_KEY"):
        check_run(spec, f"sqlite:///{tmp_path}/t.db")


@pytest.mark.parametrize(
    "url",
    ["sqlite://", "sqlite:///:memory:", "sqlite:///file::memory:?uri=true",
     "sqlite:///file:x?mode=memory&uri=true", "sqlite+pysqlite:///:memory:"],
)  # fmt: skip
def test_in_memory_storage_is_refused_for_run(url: str) -> None:
    with pytest.raises(UserError, match="in-memory database keeps no result"):
        check_run_storage(url)


@pytest.mark.parametrize("url", ["sqlite:///tuner.db", "sqlite:////tmp/x.db", "postgresql://h/db"])
def test_file_and_server_storage_pass_the_run_check(url: str) -> None:
    check_run_storage(url)


def test_in_memory_storage_from_env_or_study_file_is_refused_for_run(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    monkeypatch.setenv("TUNER_STORAGE", "sqlite://")
    spec = load_study_spec(_write(tmp_path, _data()))
    with pytest.raises(UserError, match="--storage sqlite://"):
        check_run(spec, None)
    spec = load_study_spec(_write(tmp_path, _data(storage="sqlite:///:memory:")))
    with pytest.raises(UserError, match="in-memory"):
        check_run(spec, None)


def test_random_lengths_over_the_model_max_length_are_refused_by_run(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    workload = {"random_input_len": 1000, "random_output_len": 100}
    spec = load_study_spec(
        _write(tmp_path, _data(engine={"flags": {"max-model-len": 1024}}, workload=workload))
    )
    with pytest.raises(UserError, match=r"up to 1100 tokens .* exceed the model's max length 1024"):
        check_run(spec, f"sqlite:///{tmp_path}/t.db")


def test_long_documents_over_max_model_len_less_the_output_are_refused_by_run(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    (tmp_path / "tokenizer.json").write_text("{}")  # a tokenizer directory, as run checks
    workload = {"dataset_name": "longdoc", "longdoc_lengths": [512, 65536]}
    workload["tokenizer"] = str(tmp_path)
    engine = {"flags": {"max-model-len": 65536}}
    spec = load_study_spec(_write(tmp_path, _data(engine=engine, workload=workload)))
    with pytest.raises(UserError, match=r"65536 tokens plus 1024 output .* at most 64512 tokens"):
        check_run(spec, f"sqlite:///{tmp_path}/t.db")
    workload["longdoc_lengths"] = [512, 64512]  # fits exactly
    check_run(load_study_spec(_write(tmp_path, _data(engine=engine, workload=workload))), None)


def _one_line_each(stderr: str) -> bool:
    """`tuner run` reports every problem of the study (the preflight, docs/preflight.md): each
    one line, then a count when there are several."""
    return bool(stderr) and all(line.startswith("tuner: ") for line in stderr.splitlines())


def test_run_cli_refuses_long_documents_over_max_model_len_in_one_line(tmp_path: Path) -> None:
    workload = {"dataset_name": "longdoc", "longdoc_lengths": "512,4000", "longdoc_output_len": 128}
    study = _write(tmp_path, _data(engine={"flags": {"max-model-len": 4096}}, workload=workload))
    proc = _run(
        tmp_path, study, "--storage", f"sqlite:///{tmp_path}/t.db", env={"VLLM_API_KEY": ""}
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert _one_line_each(proc.stderr), proc.stderr  # with the study's other problems
    assert "a long document of 4000 tokens plus 128 output tokens" in proc.stderr
    assert "at most 3968 tokens" in proc.stderr
    assert not (tmp_path / "t.db").exists()


def test_plan_refuses_long_documents_over_max_model_len_before_any_trial(
    tmp_path: Path, tiny_model_dir
) -> None:
    from tuner_testing import sim_study, tuner

    workload = {"dataset_name": "longdoc", "longdoc_lengths": [1000, 8000]}
    study = sim_study(tmp_path, tiny_model_dir, workload=workload)  # max-model-len 8192
    proc = tuner("plan", str(study), "--storage", f"sqlite:///{tmp_path}/p.db", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "a long document of 8000 tokens plus 1024 output tokens" in proc.stderr
    assert not (tmp_path / "p.db").exists()


def test_run_cli_refuses_in_memory_storage_and_unset_key_in_one_line(tmp_path: Path) -> None:
    study = _write(tmp_path, _data())
    proc = _run(tmp_path, study, "--storage", "sqlite:///:memory:", env={"VLLM_API_KEY": ""})
    assert proc.returncode == 2, proc.stderr
    assert _one_line_each(proc.stderr) and "in-memory database" in proc.stderr
    study = _write(tmp_path, _data(engine={"api_key_env": "TUNER_TEST_UNSET_KEY"}))
    proc = _run(tmp_path, study, "--storage", f"sqlite:///{tmp_path}/t.db")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert _one_line_each(proc.stderr) and "TUNER_TEST_UNSET_KEY is not set" in proc.stderr
    assert not (tmp_path / "t.db").exists()


def test_bench_workload_spec_refuses_the_same_values() -> None:
    for bad in ({"metric_percentiles": "abc"}, {"num_prompts": 10**7}, {"seed": -1}):
        with pytest.raises(ValueError):
            WorkloadSpec(**bad)

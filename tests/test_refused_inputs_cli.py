"""Inputs refused through the CLI (issue 24): each is one line on stderr, exit 2, no
traceback, and nothing written (no database, no log folder, no output file). None of
them needs an engine run: the refusal comes before anything starts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tuner.sim.profile_file import profile_to_yaml
from tuner.sim.profiles import GPUS
from tuner_testing import sim_study, tuner


def refused(tmp_path: Path, needle: str, *args: str, env: dict | None = None) -> str:
    """Run the CLI from `tmp_path`; it must refuse in one line holding `needle`, and leave
    no database and no `runs/` folder behind."""
    before = set(tmp_path.iterdir())
    proc = tuner(*args, cwd=tmp_path, timeout=120, env={**os.environ, **(env or {})})
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert needle in proc.stderr, proc.stderr
    assert set(tmp_path.iterdir()) == before, "the refusal wrote something"
    return proc.stderr


def _profile(tmp_path: Path, old: str, new: str) -> str:
    text = profile_to_yaml(GPUS["a6000"])
    assert old in text
    (tmp_path / "gpu.yaml").write_text(text.replace(old, new))
    return "gpu.yaml"


# Profile files: units and physical bounds --------------------------------------------------

_PROFILES = [
    # bandwidth in GB/s, not bytes/s: numpy asked for 124 TiB
    ("768000000000.0", "768", "bandwidth_bytes_s: 768 is outside 1e+10 to 1e+14 bytes/s"),
    ("154800000000000.0", "1.0e-300", "flops: 1e-300 is outside 1e+10 to 1e+17 FLOP/s"),
    ("flops_efficiency: 0.6", "flops_efficiency: 1.0e-300", "constants.flops_efficiency: 1e-300"),
    ("memory_bytes: 51527024640", "memory_bytes: 48", "memory_bytes: 48 is outside 1.07374e+09"),
    ("interconnect_bytes_s: 32000000000.0", "interconnect_bytes_s: 32", "100 MB/s to 100 TB/s"),
    ("step_overhead_s: 0.001\n", "step_overhead_s: 1.0e-300\n", "give 0, or 1e-09 to 10"),
    ("memory_bytes: 51527024640", "memory_bytes: true", "not true or false"),
]


@pytest.mark.parametrize(("old", "new", "needle"), _PROFILES)
def test_profile_out_of_physical_bounds_is_refused_by_plan_and_sim_serve(
    tmp_path: Path, tiny_model_dir: Path, old: str, new: str, needle: str
) -> None:
    profile = _profile(tmp_path, old, new)
    study = sim_study(tmp_path, tiny_model_dir, hardware={"profile": profile, "count": 4})
    refused(tmp_path, needle, "plan", str(study), "--n-trials", "1")
    if _PROFILES.index((old, new, needle)) < 2:  # the two reported crashes: every reader
        refused(tmp_path, needle, "run", str(study), "--n-trials", "1")
        refused(tmp_path, needle, "sim", "serve", "tiny-qwen2", "--gpu", profile, "--port", "1")


def test_every_builtin_profile_is_within_the_bounds(tmp_path: Path) -> None:
    from tuner.sim.profile_file import load_gpu

    for gpu in GPUS.values():
        (tmp_path / "p.yaml").write_text(profile_to_yaml(gpu))
        assert load_gpu(str(tmp_path / "p.yaml")) == gpu


# Files that are not UTF-8 --------------------------------------------------------------------


def test_non_utf8_study_profile_and_gpu_files_are_refused(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    study = sim_study(tmp_path, tiny_model_dir)
    good = study.read_bytes()
    study.write_bytes(good.replace(b"name: e2e", b"name: e2e\ndescription: caf\xe9"))
    needle = "study.yaml: the study file is not UTF-8 text (byte 0xe9"
    refused(tmp_path, needle, "plan", "study.yaml")
    refused(tmp_path, "not UTF-8 text", "run", "study.yaml")
    refused(tmp_path, "not UTF-8 text", "trials", "study.yaml")
    profile = profile_to_yaml(GPUS["a6000"]).encode().replace(b"RTX", b"\xff\xfeRTX")
    (tmp_path / "gpu.yaml").write_bytes(profile)
    refused(tmp_path, "gpu.yaml: the profile file is not UTF-8", "sim", "serve", "tiny-qwen2",
            "--gpu", "gpu.yaml")  # fmt: skip
    study = sim_study(tmp_path, tiny_model_dir, hardware={"profile": "gpu.yaml", "count": 4})
    refused(tmp_path, "gpu.yaml: the profile file is not UTF-8", "plan", str(study))


# Output paths and ports ----------------------------------------------------------------------


def test_sim_profile_output_into_a_missing_folder_or_onto_a_folder_is_refused(
    tmp_path: Path,
) -> None:
    (tmp_path / "dir").mkdir()
    refused(tmp_path, "the directory nosuch does not exist", "sim", "profile", "a6000", "-o",
            "nosuch/gpu.yaml")  # fmt: skip
    refused(tmp_path, "--output dir: is a directory", "sim", "profile", "a6000", "-o", "dir")
    assert not list((tmp_path / "dir").iterdir())


@pytest.mark.parametrize("port", ["70000", "-1", "0"])
def test_sim_serve_port_outside_1_to_65535_is_refused(tmp_path: Path, port: str) -> None:
    refused(tmp_path, "'--port'", "sim", "serve", "tiny-qwen2", "--port", port)


def test_make_tiny_model_onto_proc_or_an_existing_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("keep me")
    refused(tmp_path, "file: exists and is not a directory", "make-tiny-model", "file")
    assert (tmp_path / "file").read_text() == "keep me"
    refused(tmp_path, "/proc/x: cannot create the directory", "make-tiny-model", "/proc/x")


def test_bench_save_result_path_is_checked_before_the_benchmark(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    # Port 1 serves nothing: a checked path refuses before the client ever connects.
    args = ["bench", "--port", "1", "--model", str(tiny_model_dir), "--num-prompts", "1"]
    refused(tmp_path, "--save-result nosuch/r.json: the directory nosuch does not exist",
            *args, "--save-result", "nosuch/r.json")  # fmt: skip
    (tmp_path / "dir").mkdir()
    refused(tmp_path, "--save-result dir: is a directory", *args, "--save-result", "dir")


# `tuner run`'s checks of this machine, before the database -----------------------------------


@pytest.mark.parametrize(
    ("host", "needle"),
    [
        ("10.0.0.1", "engine.host: '10.0.0.1' (10.0.0.1) is not an address of this machine"),
        ("gpu-box-7.invalid", "engine.host: 'gpu-box-7.invalid' does not resolve"),
    ],
)
def test_engine_host_not_of_this_machine_is_refused_before_the_database(
    tmp_path: Path, tiny_model_dir: Path, host: str, needle: str
) -> None:
    study = sim_study(tmp_path, tiny_model_dir)
    text = study.read_text().replace(
        "  startup_timeout_s:", f"  host: {host}\n  startup_timeout_s:"
    )
    study.write_text(text)
    refused(tmp_path, needle, "run", str(study), "--n-trials", "1")


def test_host_id_longer_than_the_database_column_is_refused(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    study = sim_study(tmp_path, tiny_model_dir)
    env = {"TUNER_HOST_ID": "h" * 257}
    refused(tmp_path, "TUNER_HOST_ID is 257 characters long: at most 256", "run", str(study),
            env=env)  # fmt: skip
    refused(tmp_path, "only printable", "run", str(study), env={"TUNER_HOST_ID": "a\tb"})


def test_warm_start_from_a_missing_study_writes_nothing(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    study = sim_study(tmp_path, tiny_model_dir)
    args = ("run", str(study), "--n-trials", "1")
    refused(tmp_path, "--warm-start: no study named 'nosuch'", *args, "--warm-start", "nosuch", "3")
    refused(tmp_path, "--from-plan: no plan study 'e2e-simulated'", *args, "--from-plan", "2")
    refused(tmp_path, "--warm-start: K must be at least 1", *args, "--warm-start", "e2e", "0")


def test_missing_tokenizer_or_dataset_writes_nothing(tmp_path: Path, tiny_model_dir: Path) -> None:
    study = sim_study(tmp_path, tiny_model_dir, workload={"tokenizer": "nosuch-tok"})
    needle = "workload.tokenizer: tokenizer directory not found: nosuch-tok"
    refused(tmp_path, needle, "run", str(study), "--n-trials", "1")
    refused(tmp_path, needle, "plan", str(study), "--n-trials", "1")
    (tmp_path / "empty").mkdir()
    study = sim_study(tmp_path, tiny_model_dir, workload={"tokenizer": "empty"})
    refused(tmp_path, "/empty holds no tokenizer", "run", str(study))  # read from the file's folder
    mix = [
        {"name": "chat", "dataset_name": "random", "tokenizer": "nosuch-tok", "num_prompts": 4},
        {"name": "docs", "dataset_name": "random", "tokenizer": "nosuch-tok", "num_prompts": 4},
    ]
    study = sim_study(tmp_path, tiny_model_dir, workload=mix)
    refused(tmp_path, needle, "run", str(study), "--n-trials", "1")
    mix = [
        {"name": "chat", "dataset_name": "random", "tokenizer": str(tiny_model_dir)},
        {"name": "docs", "dataset_name": "jsonl", "dataset_path": "nosuch.jsonl"},
    ]
    study = sim_study(tmp_path, tiny_model_dir, workload=mix)
    needle = "workload.docs.dataset_path: dataset file not found: nosuch.jsonl"
    refused(tmp_path, needle, "run", str(study), "--n-trials", "1")


def test_broken_tokenizer_or_dataset_file_writes_nothing(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """Files that exist but cannot be read as what they claim: the workload is built before
    the database and the log folder, so the refusal leaves neither (run and plan)."""
    import shutil

    broken = tmp_path / "tok"
    shutil.copytree(tiny_model_dir, broken)
    (broken / "tokenizer.json").write_text("{garbage")
    study = sim_study(tmp_path, broken)
    for command in ("run", "plan"):
        refused(tmp_path, f"cannot load a tokenizer from {broken}", command, str(study))
    (tmp_path / "garbage.jsonl").write_text("not json at all\n")
    data = {"dataset_name": "jsonl", "dataset_path": "garbage.jsonl"}
    study = sim_study(tmp_path, tiny_model_dir, workload=data)
    refused(tmp_path, "garbage.jsonl:1: malformed JSON", "run", str(study), "--n-trials", "1")
    refused(tmp_path, "garbage.jsonl:1: malformed JSON", "plan", str(study), "--n-trials", "1")


# What the study file alone decides ----------------------------------------------------------


def _edited(tmp_path: Path, tiny_model_dir: Path, edit: dict, workload=None) -> Path:
    """sim_study with `edit` merged in, a section at a time (`engine`, `objective`, ...)."""
    import yaml

    study = sim_study(tmp_path, tiny_model_dir, workload=workload)
    data = yaml.safe_load(study.read_text())
    for section, value in edit.items():
        if isinstance(value, dict) and isinstance(data.get(section), dict):
            data[section] = {**data[section], **value}
        else:
            data[section] = value
    study.write_text(yaml.safe_dump(data, sort_keys=False))
    return study


_CAPACITY = {"mode": "capacity", "slo": ["p99_ttft_ms<=800"]}
_SPACE = {
    "parameters": {
        "a": {"type": "int", "low": 8, "high": 64, "flag": "--max-num-seqs"},
        "max-num-seqs": {"type": "int", "low": 8, "high": 64},
    }
}
_STUDY_FILE_REFUSALS = [
    # item 8: the exported command would not be the measured config
    ({"engine": {"export_drop_flags": ["tokenizer", "max-num-seqs"]}},
     "engine.export_drop_flags: 'max-num-seqs' is tuned (parameter 'max-num-seqs')"),
    # item 1: capacity reported at rates a concurrency-capped client never sent
    ({"objective": _CAPACITY, "workload": {"max_concurrency": 1}},
     "workload.max_concurrency: capacity mode searches the highest offered rate"),
    # item 7: the screen ranks by the latency score, not by capacity
    ({"objective": _CAPACITY, "search": {"fidelity": "multi"}},
     "search.fidelity: multi screens configs by the latency score, not by capacity"),
    ({"search_space": _SPACE}, "parameters 'a' and 'max-num-seqs' both set flag --max-num-seqs"),
    ({"objective": {"weights": {"p99_ttft_ms": 1e308}}},
     "objective.weights: weight of p99_ttft_ms is 1e+308: give 0 to 1e+06"),
    ({"objective": {"slo": ["p99_ttft_ms<=-5"]}},
     "SLO 'p99_ttft_ms<=-5' can never be met: metrics are never negative"),
    ({"objective": {"slo": ["output_throughput<=5"]}},
     "SLO 'output_throughput<=5' bounds the wrong side: output_throughput is higher is better"),
    ({"objective": {"slo": ["p99_ttft_ms>=100"]}}, "p99_ttft_ms is lower is better"),
    ({"workload": {"num_prompts": True}}, "workload.num_prompts: a number is expected"),
    ({"workload": {"request_rate": False}}, "workload.request_rate: a number is expected"),
    ({"budget": {"n_trials": True}}, "budget.n_trials: a number is expected"),
    ({"hardware": {"gpus": "0-9999"}}, "index 9999 is past 255: no box holds over 256 GPUs"),
    ({"hardware": {"gpus": "0-7", "gpus_per_trial": 2}},
     "hardware.gpus_per_trial: a slot has 2 GPU(s) but an engine may need 4"),
]  # fmt: skip


@pytest.mark.parametrize(("edit", "needle"), _STUDY_FILE_REFUSALS)
def test_study_file_combinations_are_refused_at_load(
    tmp_path: Path, tiny_model_dir: Path, edit: dict, needle: str
) -> None:
    study = _edited(tmp_path, tiny_model_dir, edit)
    refused(tmp_path, needle, "run", str(study), "--n-trials", "1")


def test_a_scenario_s_own_tokenizer_is_refused_not_ignored(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    other = tmp_path / "other-tok"
    other.mkdir()
    mix = [
        {"name": "chat", "dataset_name": "random", "tokenizer": str(tiny_model_dir)},
        {"name": "docs", "dataset_name": "random", "tokenizer": str(other)},
    ]
    study = sim_study(tmp_path, tiny_model_dir, workload=mix)
    needle = "workload.docs.tokenizer: every scenario is counted with one tokenizer"
    refused(tmp_path, needle, "plan", str(study), "--n-trials", "1")


def test_tp_larger_than_gpus_per_trial_from_the_cli_is_refused(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    study = sim_study(tmp_path, tiny_model_dir)  # tensor-parallel-size 4
    needle = "a slot has 2 GPU(s) but an engine may need 4"
    refused(tmp_path, needle, "run", str(study), "--gpus", "0-3", "--gpus-per-trial", "2")


def test_cpu_affinity_outside_this_machine_is_refused(tmp_path: Path, tiny_model_dir: Path) -> None:
    core = max(os.sched_getaffinity(0)) + 1
    study = _edited(tmp_path, tiny_model_dir, {"engine": {"cpu_affinity": [0, core]}})
    needle = f"engine.cpu_affinity: core(s) [{core}] are not cores of this machine"
    refused(tmp_path, needle, "run", str(study), "--n-trials", "1")


def test_log_dir_that_is_a_file_or_under_one_is_refused(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """Issue 50 item 16: a FileExistsError / NotADirectoryError traceback before."""
    study = sim_study(tmp_path, tiny_model_dir)
    (tmp_path / "taken").write_text("a file\n")
    for log_dir in ("taken", "taken/logs"):
        needle = f"--log-dir {log_dir}: " + (
            "taken" if log_dir == "taken" else str(tmp_path / "taken")
        )
        needle += " is a file, not a folder"
        refused(tmp_path, needle, "run", str(study), "--n-trials", "1", "--log-dir", log_dir)


@pytest.mark.parametrize(
    ("max_time", "needle"),
    [("inf", "must be finite numbers > 0"), ("1e308", "--max-time 1e+308 s is over a week")],
)
def test_verify_max_time_past_any_clock_is_refused(
    tmp_path: Path, tiny_model_dir: Path, max_time: str, needle: str
) -> None:
    """Issue 50 item 15: an OverflowError traceback before (exit 1)."""
    study = sim_study(tmp_path, tiny_model_dir)
    url = "http://127.0.0.1:9"
    refused(tmp_path, needle, "verify", str(study), "--base-url", url, "--max-time", max_time)

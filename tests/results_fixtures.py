"""A hand-built study in a real SQLite file, stored the way `tuner run` stores trials.

Shared by the results tests (pareto, export, report, CLI). Every figure is chosen so the
expected front and selections can be worked out by hand; see the table in `TRIALS`.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import optuna

from tuner.spec.study import load_study_spec
from tuner.store.storage import Store

STUDY_YAML = """\
name: handbuilt
engine:
  command: [.venv-vllm/bin/python, -m, vllm.entrypoints.openai.api_server, --model, "{model}"]
  model: "/mnt/My Models/Qwen 32B's \\"dir\\""
  served_model_name: qwen32b
  flags:
    tensor-parallel-size: 4
    chat-template: "templates/qwen 32 'no think' $HOME.jinja"
    chat-template-content-format: string
    load-format: dummy
  env: {VLLM_LOGGING_LEVEL: "DEBUG info"}
  export_drop_flags: [load-format]
hardware: {gpu: a6000, count: 4}
search_space:
  parameters:
    max-num-seqs: {type: int, low: 8, high: 256, log: true, default: 256}
    block-size: {type: categorical, choices: [16, 32], default: 16}
    enable-chunked-prefill: {type: bool, default: true}
    gpu-memory-utilization: {type: float, low: 0.5, high: 0.95, step: 0.05, default: 0.9}
    VLLM_CPU_KVCACHE_SPACE: {type: int, low: 1, high: 8, env: VLLM_CPU_KVCACHE_SPACE, default: 4}
workload:
  dataset_name: random
  random_input_len: 512
  random_output_len: 128
  num_prompts: 100
  request_rate: 8
objective:
  slo: ["p99_ttft_ms<=2000", "mean_tpot_ms<=80"]
"""

# number: (p99_ttft_ms, mean_tpot_ms, output_throughput, score, kind)
#   kind: ok | slo (infeasible: breaks the study SLO) | failed (engine refused) | FAIL (crash)
# Front on (p99_ttft_ms, mean_tpot_ms), feasible only: 1 and 2 (a tie), 0, 6. Trial 7 is
# dominated by 6; 3 would dominate 6 but is infeasible; 4 and 5 have no usable measurement.
TRIALS: dict[int, tuple[float, float, float, float, str]] = {
    0: (1500.0, 70.0, 1000.0, 0.0, "ok"),
    1: (900.0, 75.0, 1200.0, -0.3, "ok"),
    2: (900.0, 75.0, 1100.0, -0.2, "ok"),
    3: (2500.0, 40.0, 1500.0, -0.5, "slo"),
    4: (0.0, 0.0, 0.0, 10.0, "failed"),
    5: (0.0, 0.0, 0.0, 0.0, "FAIL"),
    6: (1800.0, 50.0, 1300.0, -0.4, "ok"),
    7: (1900.0, 60.0, 900.0, 0.1, "ok"),
}
PARAMS = {
    n: {
        "max-num-seqs": [256, 64, 32, 128, 8, 16, 48, 200][n],
        "block-size": [16, 32, 32, 16, 16, 32, 32, 16][n],
        "enable-chunked-prefill": [True, True, False, True, False, True, False, True][n],
        "gpu-memory-utilization": [0.9, 0.85, 0.8, 0.95, 0.5, 0.9, 0.9, 0.7][n],
        "VLLM_CPU_KVCACHE_SPACE": [4, 2, 3, 8, 1, 4, 6, 5][n],
    }
    for n in TRIALS
}


def write_study_file(dir_: Path, text: str = STUDY_YAML) -> Path:
    path = dir_ / "study.yaml"
    path.write_text(text)
    return path


def build_study(
    dir_: Path,
    *,
    trials: dict[int, tuple[float, float, float, float, str]] | None = None,
    mode: str = "scalar",
    simulated: bool = False,
    text: str = STUDY_YAML,
    attrs: dict[int, dict[str, Any]] | None = None,
) -> tuple[Path, str]:
    """Write the study file and a SQLite database holding the trials; returns (file, URL).
    `attrs`: more user attrs of trial N (e.g. `capacity_rps`)."""
    from tuner.measure.mixes import objective_of
    from tuner.spec.space import distributions

    study_file = write_study_file(dir_, text.replace("slo:", f"mode: {mode}\n  slo:"))
    spec = load_study_spec(study_file)
    url = f"sqlite:///{dir_ / 'tuner.db'}"
    store = Store(url)
    name = f"{spec.name}-simulated" if simulated else spec.name
    study = store.create_study(
        spec,
        name,
        optuna.samplers.RandomSampler(seed=0),
        list(objective_of(spec).directions().values()),
        list(objective_of(spec).directions()),
        simulated,
    )
    dists = distributions(spec.search_space)
    rows = sorted((TRIALS if trials is None else trials).items())
    measured = [
        {"p99_ttft_ms": ttft, "mean_tpot_ms": tpot, "output_throughput": thr}
        for _, (ttft, tpot, thr, _, kind) in rows
        if kind in ("ok", "slo")
    ]
    # What `tuner run` tells Optuna for a failed trial.
    penalty = objective_of(spec).penalty_values(measured)
    for number, (ttft, tpot, thr, score, kind) in rows:
        trial = _trial(number, ttft, tpot, thr, score, kind, dists, mode, simulated, penalty)
        trial.user_attrs.update((attrs or {}).get(number, {}))
        study.add_trial(trial)
    store.close()
    return study_file, url


def _trial(number, ttft, tpot, thr, score, kind, dists, mode, simulated, penalty) -> Any:
    params = PARAMS[number % len(PARAMS)]
    attrs: dict[str, Any] = {"baseline": number == 0, "simulated": simulated, "score": score}
    constraints = {"measured": 0.0, "failed_requests": -0.05, "p99_ttft_ms<=2000": 0.0}
    constraints["mean_tpot_ms<=80"] = 0.0
    values = [score] if mode in ("scalar", "capacity") else [ttft, tpot, thr]
    if kind in ("ok", "slo"):
        attrs.update(
            vllm_version="0.10.1.1",
            completed=100,
            failed=0,
            duration=12.5,
            p99_ttft_ms=ttft,
            mean_ttft_ms=ttft / 3,
            mean_tpot_ms=tpot,
            p99_tpot_ms=tpot * 1.5,
            output_throughput=thr,
            total_token_throughput=thr * 5,
            request_throughput=thr / 128,
            p99_ttft_ms_ci=[ttft * 0.9, ttft * 1.1],
            # an interval on mean TPOT too: trial 6 (50 ms) is then clearly better than the
            # baseline's 70 ms, so it is the one recommended (docs/results.md)
            mean_tpot_ms_ci=[tpot * 0.9, tpot * 1.1],
            slo_met=kind == "ok",
        )
    if kind == "slo":
        constraints["p99_ttft_ms<=2000"] = (ttft - 2000) / 2000
    if kind == "failed":
        attrs.update(
            failure_kind="kv_cache_too_small",
            failure_reason="No available memory for the cache blocks.",
        )
        constraints = {k: 1.0 for k in constraints}
        values = penalty
    system_attrs = {f"constraints:{k}": v for k, v in constraints.items()}
    system_attrs["constraints"] = list(constraints.values())  # what optuna-dashboard reads
    state = optuna.trial.TrialState.FAIL if kind == "FAIL" else optuna.trial.TrialState.COMPLETE
    if kind == "FAIL":
        attrs.update(failure_kind="interrupted", failure_reason="interrupted")
        values = None
    return optuna.trial.create_trial(
        state=state,
        values=values,
        params=params,
        distributions=dists,
        user_attrs=attrs,
        system_attrs=system_attrs,
    )


class _State:
    def __init__(self, name: str) -> None:
        self.name = name


def frozen(number: int, state: str = "COMPLETE", constraints=None, **attrs) -> SimpleNamespace:
    """A FrozenTrial look-alike for the pure readers; the storage-backed path is covered by
    `build_study` and the CLI tests."""
    return SimpleNamespace(
        number=number,
        state=_State(state),
        params={"max-num-seqs": 8 * (number + 1)},
        user_attrs=attrs,
        system_attrs={f"constraints:{k}": v for k, v in (constraints or {}).items()},
        values=[attrs.get("score", 0.0)] if state == "COMPLETE" else None,
    )

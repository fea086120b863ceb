"""Read-only views of a stored study: the trial table and the best command."""

from __future__ import annotations

from typing import Any

import optuna
import pandas as pd
from rich.console import Console
from rich.table import Table

from tuner.config import StudySpec
from tuner.errors import UserError
from tuner.export import shell_command
from tuner.objective import HEADLINE_METRICS, clearly_better
from tuner.pareto import trial_point

FAILURE_CHARS = 60


def is_feasible(t: optuna.trial.FrozenTrial) -> bool:
    """Measured and meeting every constraint: the one classification results code uses."""
    return trial_point(t).feasible


def confirmation_scores(study: optuna.Study) -> dict[int, list[float]]:
    """Every measured score of each config that `--confirm` re-measured, the original first."""
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    runs: dict[int, list[float]] = {}
    for t in trials.values():
        origin = t.user_attrs.get("confirm_of")
        if origin is not None and origin in trials and is_feasible(t):
            runs.setdefault(origin, [trials[origin].user_attrs["score"]])
            runs[origin].append(t.user_attrs["score"])
    return runs


def ranked_feasible(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """Feasible measured configs, best first: by the mean score over confirmation runs where
    there are some, else by the single score (which exists in both objective modes)."""
    runs = confirmation_scores(study)
    trials = [
        t
        for t in study.get_trials(deepcopy=False)
        if is_feasible(t) and "score" in t.user_attrs and "confirm_of" not in t.user_attrs
    ]

    def key(t: optuna.trial.FrozenTrial) -> tuple[float, int]:
        scores = runs.get(t.number, [t.user_attrs["score"]])
        return (sum(scores) / len(scores), t.number)

    return sorted(trials, key=key)


def trials_frame(study: optuna.Study) -> pd.DataFrame:
    """One row per trial: number, state, parameters, headline metrics, score, failure."""
    rows: list[dict[str, Any]] = []
    for t in study.get_trials(deepcopy=False):
        a = t.user_attrs
        state = t.state.name
        if t.state == optuna.trial.TrialState.COMPLETE and not is_feasible(t):
            state = "INFEASIBLE"
        row: dict[str, Any] = {"number": t.number, "state": state}
        row.update({f"param_{k}": v for k, v in t.params.items()})
        row.update({m: a.get(m) for m in HEADLINE_METRICS})
        row["score"] = a.get("score")
        row["baseline"] = bool(a.get("baseline"))
        row["reused_from"] = a.get("reused_from")
        broken = [k for k, v in t.constraints.items() if v > 0 and not k.isdigit()]
        if "failure_kind" in a:
            row["failure"] = f"{a['failure_kind']}: {a.get('failure_reason', '')}"
        else:
            row["failure"] = f"breaks {', '.join(broken)}" if broken else ""
        rows.append(row)
    return pd.DataFrame(rows)


def print_trials_table(frame: pd.DataFrame, console: Console | None = None) -> None:
    console = console or Console(width=200)
    table = Table(show_lines=False)
    for col in frame.columns:
        if col in ("baseline", "reused_from"):
            continue
        if col == "failure":
            table.add_column(col, min_width=30, no_wrap=True, overflow="ellipsis")
        elif col in ("number", "state"):
            table.add_column(col, no_wrap=True)
        else:
            table.add_column(col.removeprefix("param_"), overflow="fold")
    for _, row in frame.iterrows():
        cells = []
        for col in frame.columns:
            if col in ("baseline", "reused_from"):
                continue
            v = row[col]
            if col == "number" and row["baseline"]:
                cells.append(f"{v} (baseline)")
            elif col == "failure" and len(v) > FAILURE_CHARS:
                cells.append(v[: FAILURE_CHARS - 1] + "…")  # the whole reason: --format csv
            elif isinstance(v, float):
                cells.append("" if pd.isna(v) else f"{v:.4g}")
            else:
                cells.append("" if v is None else str(v))
        table.add_row(*cells)
    console.print(table)


def best_report(study: optuna.Study, spec: StudySpec) -> str:
    """The best feasible trial as a serve command, with a plain word on how sure we are."""
    ranked = ranked_feasible(study)
    if not ranked:
        raise UserError(f"study {study.study_name!r} has no complete feasible trial yet")
    top = ranked[0]
    a = top.user_attrs
    simulated = bool(a.get("simulated"))
    lines = [
        f"# best trial {top.number} of study {study.study_name}"
        + (" (SIMULATED: figures are predictions, not measurements)" if simulated else ""),
        f"# score {a['score']:+.3f} (baseline = 0, lower is better); "
        f"p99 TTFT {a.get('p99_ttft_ms', float('nan')):.1f} ms, "
        f"mean TPOT {a.get('mean_tpot_ms', float('nan')):.2f} ms, "
        f"output {a.get('output_throughput', float('nan')):.1f} tok/s",
    ]
    runs = confirmation_scores(study).get(top.number)
    if runs:
        mean = sum(runs) / len(runs)
        spread = (sum((x - mean) ** 2 for x in runs) / max(len(runs) - 1, 1)) ** 0.5
        lines.append(f"# confirmed over {len(runs)} runs: score {mean:+.3f} ± {spread:.3f} (std)")
    lines += [f"# {line}" for line in _confidence(study, top, ranked, spec)]
    lines.append(shell_command(spec, top.params))
    return "\n".join(lines)


def _ci(t: optuna.trial.FrozenTrial) -> dict[str, tuple[float, float]]:
    return {
        m: tuple(t.user_attrs[f"{m}_ci"]) for m in HEADLINE_METRICS if f"{m}_ci" in t.user_attrs
    }


def _confidence(study, top, ranked, spec) -> list[str]:
    weights = spec.objective.weights
    out = []
    base = [t for t in ranked if t.user_attrs.get("baseline")]
    if top.user_attrs.get("baseline"):
        out.append("the baseline (vLLM's defaults) is the best trial: no tuned config beat it")
    elif base and not clearly_better(_ci(top), _ci(base[0]), weights):
        out.append(
            f"NOT clearly better than the baseline (trial {base[0].number}): "
            "the 95% confidence intervals overlap on every weighted metric"
        )
    runner_up = next((t for t in ranked if t.number != top.number), None)
    if runner_up is not None and not clearly_better(_ci(top), _ci(runner_up), weights):
        out.append(
            f"not clearly better than the runner-up (trial {runner_up.number}): "
            "re-measure both (tuner run --confirm K) before trusting the order"
        )
    return out

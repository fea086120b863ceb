"""The table of `tuner.fidelity.bands.PUBLISHED_BANDS`, from the cross-validated published run.

Reads benchmarks/published/cases.yaml (each case's workload: its regime, by
`tuner.fidelity.bands.regime`) and benchmarks/published/cv_last_run.json (written by
benchmarks/published_cv.py: every V1 figure predicted by constants fitted without its source,
its SIMULATED / published `ratio`), and prints, per regime and family, the interval of
published / SIMULATED holding the central `COVERAGE` of those held-out figures (the lower
quantile rounded down to the figure below it, the upper one up to the figure above, then 2
decimals outward), widened to hold 1. A regime with fewer than `MIN_FIGURES` figures of a
family takes that family's interval over every regime.

Then the band's coverage, leave one source out: for each source, the table made without its
figures, and the share of its figures inside their band. That is the coverage a user whose
host and GPU the suite lacks can expect (issue 45: at least 80 %).

    .venv/bin/python benchmarks/sim_bands.py [--json] [--run CV_JSON]

Figures of one case are correlated (a run's mean, median and P99 TTFT), so the shares are of
figures, not of runs.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import NamedTuple

import numpy as np
import yaml

from tuner.fidelity.bands import COVERAGE, FAMILIES, REGIMES, family, regime

REPO = Path(__file__).resolve().parent.parent
CASES = REPO / "benchmarks" / "published" / "cases.yaml"
CV_RUN = REPO / "benchmarks" / "published" / "cv_last_run.json"
MIN_FIGURES = 5

Table = dict[str, dict[str, tuple[float, float]]]


class Figure(NamedTuple):
    """One held-out published figure: whose, its regime and family, published / SIMULATED."""

    source: str
    regime: str
    family: str
    ratio: float


def case_regime(workload: dict) -> str:
    """A case's regime from its workload as cases.yaml writes it."""
    rate = float(workload.get("request_rate", math.inf))
    prompt = float(workload.get("input_len") or 0)
    if not prompt and workload.get("input_tokens"):
        prompt = workload["input_tokens"] / workload["num_prompts"]
    return regime(
        request_rate=rate,
        max_concurrency=workload.get("max_concurrency"),
        prompt_tokens=prompt,
        num_prompts=workload.get("num_prompts"),
    )


def interval(ratios: list[float]) -> tuple[float, float]:
    """The central `COVERAGE` of `ratios`, outward to 2 decimals, holding 1."""
    tail = (1.0 - COVERAGE) / 2
    low = float(np.quantile(ratios, tail, method="lower"))
    high = float(np.quantile(ratios, 1.0 - tail, method="higher"))
    return min(math.floor(low * 100) / 100, 1.0), max(math.ceil(high * 100) / 100, 1.0)


def figures_of(rows: list[dict], cases: dict[str, dict]) -> list[Figure]:
    """The banded figures of `rows` (published_cv's: case, source, metric, ratio)."""
    out = []
    for row in rows:
        fam = family(row["metric"])
        if fam is None or not row["ratio"]:
            continue
        reg = case_regime(cases[row["case"]]["workload"])
        out.append(Figure(row["source"], reg, fam, 1.0 / row["ratio"]))
    return out


def figures(run: Path = CV_RUN) -> list[Figure]:
    """Every cross-validated V1 figure on file."""
    cases = {c["id"]: c for c in yaml.safe_load(CASES.read_text())["cases"]}
    return figures_of(json.loads(run.read_text())["rows"]["cross_validated"], cases)


def table(figs: list[Figure]) -> Table:
    found: dict[tuple[str, str], list[float]] = defaultdict(list)
    for f in figs:
        found[(f.regime, f.family)].append(f.ratio)
    pooled = {fam: [f.ratio for f in figs if f.family == fam] for fam in FAMILIES}
    return {
        reg: {
            fam: interval(
                found[(reg, fam)] if len(found[(reg, fam)]) >= MIN_FIGURES else pooled[fam]
            )
            for fam in FAMILIES
            if pooled[fam]
        }
        for reg in REGIMES
    }


def inside(bands: Table, f: Figure) -> bool:
    low, high = bands[f.regime][f.family]
    return low <= f.ratio <= high


def coverage(figs: list[Figure]) -> dict:
    """Leave one source out: each source's figures against the table made without them.
    {source: [inside, figures]}, and "all"."""
    out: dict[str, list[int]] = {}
    for source in sorted({f.source for f in figs}):
        others = table([f for f in figs if f.source != source])
        own = [f for f in figs if f.source == source]
        out[source] = [
            sum(inside(others, f) for f in own if f.family in others[f.regime]),
            len(own),
        ]
    out["all"] = [sum(v[0] for v in out.values()), sum(v[1] for v in out.values())]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON, not the literal")
    parser.add_argument("--run", type=Path, default=CV_RUN, help="published_cv.py's JSON")
    args = parser.parse_args()
    figs = figures(args.run)
    bands, covered = table(figs), coverage(figs)
    if args.json:
        print(json.dumps({"bands": bands, "coverage_leave_one_source_out": covered}, indent=1))
        return
    for reg, fams in bands.items():
        cells = ", ".join(f'"{f}": ({lo!r}, {hi!r})' for f, (lo, hi) in fams.items())
        print(f'    "{reg}": {{{cells}}},')
    fitted_in = sum(inside(bands, f) for f in figs)
    print(f"# {fitted_in} of {len(figs)} held-out figures inside the table above")
    for source, (n_in, n) in covered.items():
        print(f"# leave one source out, {source}: {n_in} of {n} inside ({n_in / n:.0%})")


if __name__ == "__main__":
    main()

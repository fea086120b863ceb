"""The table of `tuner.fidelity.bands.PUBLISHED_BANDS`, from the published real-GPU run on file.

Reads benchmarks/published/cases.yaml (each case's workload: its regime, by
`tuner.fidelity.bands.regime`) and benchmarks/published/last_run.json (each figure's SIMULATED /
published `ratio`), keeps the V1 figures (fit and held-out cases: held-out alone has 29), and
prints, per regime and family, the interval of published / SIMULATED holding the central 80 %
of them (the 10th percentile rounded down to the figure below it, the 90th up to the one
above, then 2 decimals outward), widened to hold 1. A regime with fewer than `MIN_FIGURES`
figures of a family takes that family's interval over every regime.

    .venv/bin/python benchmarks/sim_bands.py [--json]

Figures of one case are correlated (a run's mean, median and P99 TTFT), so the 80 % is of
figures, not of runs.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from pathlib import Path

import numpy as np
import yaml

from tuner.fidelity.bands import COVERAGE, FAMILIES, REGIMES, family, regime

REPO = Path(__file__).resolve().parent.parent
CASES = REPO / "benchmarks" / "published" / "cases.yaml"
LAST_RUN = REPO / "benchmarks" / "published" / "last_run.json"
MIN_FIGURES = 5


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


def figures() -> list[tuple[str, str, str, float]]:
    """(split, regime, family, published / SIMULATED) of every V1 figure on file."""
    cases = {c["id"]: c for c in yaml.safe_load(CASES.read_text())["cases"]}
    out = []
    for row in json.loads(LAST_RUN.read_text())["rows"]:
        fam = family(row["metric"])
        if row["engine"] != "V1" or fam is None:
            continue
        ratio = 1.0 / row["ratio"]  # the file's ratio is SIMULATED / published
        out.append((row["split"], case_regime(cases[row["case"]]["workload"]), fam, ratio))
    return out


def table() -> dict[str, dict[str, tuple[float, float]]]:
    found: dict[tuple[str, str], list[float]] = defaultdict(list)
    for _, reg, fam, ratio in figures():
        found[(reg, fam)].append(ratio)
    pooled = {
        fam: interval([r for (_, f), rs in found.items() if f == fam for r in rs])
        for fam in FAMILIES
    }
    return {
        reg: {
            fam: interval(found[(reg, fam)])
            if len(found[(reg, fam)]) >= MIN_FIGURES
            else pooled[fam]
            for fam in FAMILIES
        }
        for reg in REGIMES
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON, not the literal")
    args = parser.parse_args()
    bands = table()
    if args.json:
        print(json.dumps(bands, indent=1))
        return
    for reg, fams in bands.items():
        cells = ", ".join(f'"{f}": ({lo!r}, {hi!r})' for f, (lo, hi) in fams.items())
        print(f'    "{reg}": {{{cells}}},')
    for split in ("held_out", None):  # how many figures the bands hold
        kept = [(r, f, x) for s, r, f, x in figures() if split in (None, s)]
        inside = sum(bands[r][f][0] <= x <= bands[r][f][1] for r, f, x in kept)
        print(f"# {split or 'all'}: {inside} of {len(kept)} V1 figures inside their band")


if __name__ == "__main__":
    main()

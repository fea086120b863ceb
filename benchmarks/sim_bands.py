"""The table of `tuner.fidelity.bands.PUBLISHED_BANDS`, from the cross-validated published run.

Reads benchmarks/published/cases.yaml (each case's workload: its regime, by
`tuner.fidelity.bands.regime`) and benchmarks/published/cv_last_run.json (written by
benchmarks/published_cv.py: every V1 figure predicted by constants fitted without its source,
its SIMULATED / published `ratio`), and prints the band per regime and family.

The exchangeable unit is the source, not the figure: one source's errors lean one way (its
host, its vLLM version, its one miss), so a new user's GPU and host are a new source, and the
band must hold a source the table never saw. Split conformal over sources, on |ln(published /
SIMULATED)|, symmetric about 1:

- each source's score is the |ln ratio| that holds `WITHIN_SOURCE` (90 %) of its figures of
  the family (its odd figure aside, its lean and spread together);
- of n sources' scores, the band's half-width is the k-th smallest, k = ceil((n + 1) ×
  `COVERAGE`): a new source's score is at most that with probability k / (n + 1) ≥ 80 %,
  when sources are exchangeable; it needs n ≥ `MIN_SOURCES` (4);
- a regime takes its own figures' band where `MIN_SOURCES` sources have figures of the family
  in it, else the family's over every regime; a family with fewer sources than that takes the
  wider of its own and every family's (each source's score over all its figures);
- [exp(-w), exp(w)], outward to 2 decimals: it always holds 1.

Then its coverage, nested leave one source out: for each source, the table made without its
figures (by the same rule), and the share of its figures inside their band, per source and per
family. That is the coverage a user whose host and GPU the suite lacks can expect (issue 45:
at least 80 %).

    .venv/bin/python benchmarks/sim_bands.py [--json] [--run CV_JSON]

Figures of one case are correlated (a run's mean, median and P99 TTFT), so the shares are of
figures, not of runs; with five sources, each share rests on few independent draws.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

import numpy as np
import yaml

from tuner.fidelity.bands import COVERAGE, FAMILIES, REGIMES, family, regime

REPO = Path(__file__).resolve().parent.parent
CASES = REPO / "benchmarks" / "published" / "cases.yaml"
CV_RUN = REPO / "benchmarks" / "published" / "cv_last_run.json"
WITHIN_SOURCE = 0.9  # a source's score: the |ln ratio| holding this share of its figures
MIN_SOURCES = 4  # the fewest sources whose k-th score, k = ceil((n + 1) × 0.8), exists

Table = dict[str, dict[str, tuple[float, float]]]
Tally = dict[str, list[int]]  # {who: [figures inside their band, figures]}


class Figure(NamedTuple):
    """One held-out published figure: whose, its regime and family, published / SIMULATED,
    and its vLLM bench key."""

    source: str
    regime: str
    family: str
    ratio: float
    metric: str = ""


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


def figures_of(rows: list[dict], cases: dict[str, dict]) -> list[Figure]:
    """The banded figures of `rows` (published_cv's: case, source, metric, ratio)."""
    out = []
    for row in rows:
        fam = family(row["metric"])
        if fam is None or not row["ratio"]:
            continue
        reg = case_regime(cases[row["case"]]["workload"])
        out.append(Figure(row["source"], reg, fam, 1.0 / row["ratio"], row["metric"]))
    return out


def figures(run: Path = CV_RUN) -> list[Figure]:
    """Every cross-validated V1 figure on file."""
    cases = {c["id"]: c for c in yaml.safe_load(CASES.read_text())["cases"]}
    return figures_of(json.loads(run.read_text())["rows"]["cross_validated"], cases)


def rank(n: int) -> int:
    """k: the k-th smallest of n exchangeable scores bounds the next with probability
    k / (n + 1) ≥ `COVERAGE`; n when n is too few for that (the widest there is)."""
    return min(math.ceil(round((n + 1) * COVERAGE, 9)), n)


def half_width(figs: Iterable[Figure], within: float = WITHIN_SOURCE) -> tuple[float, int]:
    """The band's half-width in ln ratio over `figs`' sources (`rank`-th smallest of their
    scores, each the |ln ratio| holding `within` of the source's figures), and how many
    sources it rests on."""
    by_source: dict[str, list[float]] = defaultdict(list)
    for f in figs:
        by_source[f.source].append(abs(math.log(f.ratio)))
    scores = sorted(float(np.quantile(x, within, method="higher")) for x in by_source.values())
    return (scores[rank(len(scores)) - 1] if scores else 0.0), len(scores)


def band(w: float) -> tuple[float, float]:
    """[exp(-w), exp(w)], outward to 2 decimals."""
    return math.floor(math.exp(-w) * 100) / 100, math.ceil(math.exp(w) * 100) / 100


def table(figs: list[Figure], within: float = WITHIN_SOURCE) -> Table:
    """The band per regime and family (the module's rule)."""
    every, _ = half_width(figs, within)
    per_family: dict[str, float] = {}
    for fam in FAMILIES:
        w, n = half_width((f for f in figs if f.family == fam), within)
        if n:
            per_family[fam] = w if n >= MIN_SOURCES else max(w, every)
    out: Table = {}
    for reg in REGIMES:
        out[reg] = {}
        for fam, w_family in per_family.items():
            w, n = half_width((f for f in figs if f.family == fam and f.regime == reg), within)
            out[reg][fam] = band(w if n >= MIN_SOURCES else w_family)
    return out


def inside(bands: Table, f: Figure) -> bool:
    low, high = bands[f.regime][f.family]
    return low <= f.ratio <= high


def held_out(figs: list[Figure], within: float = WITHIN_SOURCE) -> list[tuple[Figure, bool]]:
    """Nested leave one source out: each figure, and whether it lies inside the band of the
    table made without its source (a family no other source has: outside)."""
    out = []
    for source in sorted({f.source for f in figs}):
        others = table([f for f in figs if f.source != source], within)
        out += [
            (f, f.family in others[f.regime] and inside(others, f))
            for f in figs
            if f.source == source
        ]
    return out


def tally(judged: list[tuple[Figure, bool]], key: str) -> Tally:
    """{the figures' `key` (source, family, metric): [inside, figures]}, and "all"."""
    out: Tally = defaultdict(lambda: [0, 0])
    for f, ok in sorted(judged, key=lambda x: getattr(x[0], key)):
        for who in (getattr(f, key), "all"):
            out[who][0] += ok
            out[who][1] += 1
    return dict(out)


def coverage(figs: list[Figure]) -> Tally:
    """Nested leave one source out, per source: {source: [inside, figures]}, and "all"."""
    return tally(held_out(figs), "source")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON, not the literal")
    parser.add_argument("--run", type=Path, default=CV_RUN, help="published_cv.py's JSON")
    parser.add_argument(
        "--within", type=float, default=WITHIN_SOURCE, help="a source's share its score holds"
    )
    args = parser.parse_args()
    figs = figures(args.run)
    bands, judged = table(figs, args.within), held_out(figs, args.within)
    covered = {key: tally(judged, key) for key in ("source", "family", "metric")}
    if args.json:
        print(json.dumps({"bands": bands, "coverage_leave_one_source_out": covered}, indent=1))
        return
    for reg, fams in bands.items():
        cells = ", ".join(f'"{f}": ({lo!r}, {hi!r})' for f, (lo, hi) in fams.items())
        print(f'    "{reg}": {{{cells}}},')
    sources = len({f.source for f in figs})
    print(f"# {sources} sources; inside the table above: {sum(inside(bands, f) for f in figs)}")
    print(f"# of {len(figs)} (in sample)")
    print("# nested leave one source out (each source against the table made without it):")
    for key in ("family", "source", "metric"):
        for who, (n_in, n) in covered[key].items():
            if who != "all":
                print(f"#   {key} {who}: {n_in} of {n} inside ({n_in / n:.0%})")
    n_in, n = covered["source"]["all"]
    print(f"#   all: {n_in} of {n} inside ({n_in / n:.0%})")


if __name__ == "__main__":
    main()

"""How often the study loop reads the stored study per trial.

Runs a `tuner plan` loop (the simulator in virtual time, a real SQLite file) and counts the
loop's calls that fetch every trial of the study (`study.get_trials` without a state filter),
those filtered by state, and the reads of the study's attrs (`study.user_attrs`). Before the
loop read the study once per trial (`tuner.run.reading`) it was 5.5 full reads and 7.25
attr reads a trial.

    .venv/bin/python benchmarks/study_reads.py --trials 4
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from tuner.run.loop import StudyLoop
from tuner.runners.plan import PlanRunner
from tuner.spec.study import load_study_spec
from tuner.store.storage import Store
from tuner.tools.tinymodel import make_tiny_model
from tuner_testing import sim_study

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=4)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        tokenizer = REPO / ".cache" / "tiny-qwen2"
        if not tokenizer.exists():
            tokenizer = make_tiny_model(tmp / "tiny")
        spec = load_study_spec(sim_study(tmp, tokenizer))
        loop = StudyLoop(spec, Store(f"sqlite:///{tmp}/reads.db"), PlanRunner(spec))
        counts = {"full": 0, "filtered": 0, "attrs": 0}
        get_trials = loop.study.get_trials

        def counted(*a, **kw):
            counts["full" if kw.get("states") is None else "filtered"] += 1
            return get_trials(*a, **kw)

        loop.study.get_trials = counted  # type: ignore[method-assign]
        study_type = type(loop.study)
        user_attrs = study_type.user_attrs

        def attrs(self):
            counts["attrs"] += 1
            return user_attrs.fget(self)

        study_type.user_attrs = property(attrs)  # type: ignore[method-assign,assignment]
        try:
            loop.run(n_trials=args.trials)
        finally:
            study_type.user_attrs = user_attrs  # type: ignore[method-assign]
    n = args.trials
    print(
        f"{n} trials: {counts['full']} full study reads ({counts['full'] / n:.2f} a trial), "
        f"{counts['filtered']} by state, {counts['attrs']} study-attr reads "
        f"({counts['attrs'] / n:.2f} a trial); the loop's own count: {loop.reading.reads}"
    )


if __name__ == "__main__":
    main()

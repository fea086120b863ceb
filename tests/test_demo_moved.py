"""`tuner best` on the README's demo names every figure that moved (issue 46, item 3): the
demo's tuned config (`--max-num-batched-tokens 1045`, `tuner plan studies/demo-sim.yaml`'s
best) wins on mean TPOT and pays for it in median ITL, a bimodal median whose interval is
wide; the line says so, with its size, "not clearly"."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tuner import trial as tr
from tuner.results.best import best_report
from tuner.run.loop import StudyLoop
from tuner.runners.plan import PlanRunner
from tuner.spec.study import load_study_spec
from tuner.store.storage import Store
from tuner_testing import REPO

pytestmark = pytest.mark.slow  # two planned trials of the demo's workload


def test_best_on_the_demo_names_its_median_itl_change(tiny_model_dir: Path, tmp_path: Path) -> None:
    data = yaml.safe_load((REPO / "studies" / "demo-sim.yaml").read_text())
    data["search_space"] = str(REPO / "search_spaces" / "vllm-core.yaml")
    data["engine"]["flags"]["tokenizer"] = data["workload"]["tokenizer"] = str(tiny_model_dir)
    data["budget"]["n_trials"] = 2
    data.pop("search")  # no screen: the baseline, then the demo's best config
    path = tmp_path / "demo.yaml"
    path.write_text(yaml.safe_dump(data))
    spec = load_study_spec(path)
    store = Store(f"sqlite:///{tmp_path}/demo.db")
    loop = StudyLoop(spec, store, PlanRunner(spec), prediction_skip=False)
    loop.study.enqueue_trial(
        {
            "max-num-seqs": 338,
            "block-size": 16,
            "max-num-batched-tokens": 1045,
            "gpu-memory-utilization": 0.89,
            "enable-chunked-prefill": True,
        }
    )
    loop.run()
    study = store.load_study("demo-sim-simulated")
    text = best_report(tr.read_all(study.get_trials()), study.study_name, tr.StudyRecord.of(study))
    store.close()
    (worse,) = [line for line in text.splitlines() if line.startswith("# WORSE than")]
    found = re.search(r"median ITL ([\d.]+) → ([\d.]+) ms \(×([\d.]+); (not )?clearly: CI ", worse)
    assert found, worse
    before, after, factor = (float(x) for x in found.group(1, 2, 3))
    assert factor > 3 and factor == pytest.approx(after / before, abs=0.05)

"""The shipped real-box studies say how to get every file they need (issue 21, §5): the model,
the chat template, the dataset; or use a built-in dataset that needs none."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.spec.study import load_study_spec
from tuner_testing import REPO

REAL_BOX = sorted((REPO / "studies").glob("a6000x4-*.yaml"))
BUILT_IN = ("random", "longdoc")  # datasets that need no file (docs/datasets.md)


def _needed(path: Path) -> list[str]:
    """The names of the files the study reads from the box."""
    spec = load_study_spec(path)
    names = [Path(spec.engine.model).name]
    template = spec.engine.flags.get("chat-template")
    if template:
        names.append(Path(str(template)).name)
    for w in [spec.workload, *spec.scenarios]:
        if w.dataset_name not in BUILT_IN:
            assert w.dataset_path, path
            names.append(Path(w.dataset_path).name)
    return names


@pytest.mark.parametrize("study", REAL_BOX, ids=lambda p: p.stem)
def test_every_needed_file_has_a_way_to_get_it(study: Path) -> None:
    comments = "\n".join(
        line.split("#", 1)[1] for line in study.read_text().splitlines() if "#" in line
    )
    assert REAL_BOX and len(_needed(study)) >= 1
    for name in _needed(study):
        assert name in comments, f"{study.name}: no comment names {name}"
    assert "huggingface-cli download deepseek-ai/DeepSeek-R1-Distill-Qwen-32B" in comments
    spec = load_study_spec(study)
    if spec.workload.dataset_name not in BUILT_IN:
        assert "--repo-type dataset" in comments  # the dataset's download
        assert "dataset_name: random" in comments  # and the way around it

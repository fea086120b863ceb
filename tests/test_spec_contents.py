"""An edited input file (profile, dataset, tokenizer, chat template) is a changed spec, though
the study file names it by the same path (issue 24, item 5)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tuner.spec.study import load_study_spec
from tuner.trial import specs
from tuner_testing import sim_study, tuner


def _plan(study: Path, *extra: str) -> object:
    return tuner(
        "plan",
        str(study),
        "--n-trials",
        "1",
        "--storage",
        "sqlite:///t.db",
        *extra,
        cwd=study.parent,
    )


def _trials(study: Path) -> list[dict]:
    out = tuner(
        "trials",
        str(study),
        "--simulated",
        "--storage",
        "sqlite:///t.db",
        "--format",
        "json",
        cwd=study.parent,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.slow  # a whole study
def test_an_edited_profile_is_a_changed_spec(tmp_path: Path, tiny_model_dir: Path) -> None:
    assert tuner("sim", "profile", "a6000", "-o", "prof.yaml", cwd=tmp_path).returncode == 0
    study = sim_study(
        tmp_path,
        tiny_model_dir,
        hardware={"profile": "prof.yaml", "count": 4},
        workload={"num_prompts": 4},
    )
    assert _plan(study).returncode == 0
    before = _trials(study)

    # the same path, half the memory bandwidth: every prediction changes
    profile = tmp_path / "prof.yaml"
    data = yaml.safe_load(profile.read_text())
    data["bandwidth_bytes_s"] /= 2
    profile.write_text(yaml.safe_dump(data))
    refused = _plan(study)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert refused.stderr.count("\n") == 1
    assert "hardware.profile: the file's contents changed" in refused.stderr
    assert _trials(study) == before  # nothing written

    assert _plan(study, "--accept-changes").returncode == 0
    after = _trials(study)[len(before) :]
    assert len(after) == 1 and after[0]["baseline"] is True and after[0]["score"] == 0.0
    assert len({t["spec"] for t in _trials(study)}) == 2  # two specs: the column shows
    assert after[0]["p99_ttft_ms"] > before[0]["p99_ttft_ms"]  # the slower profile's baseline


def test_dataset_tokenizer_and_chat_template_contents_are_in_the_spec(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    dataset = tmp_path / "prompts.jsonl"
    dataset.write_text(json.dumps({"prompt": "hello", "output_len": 4}) + "\n")
    template = tmp_path / "chat.jinja"
    template.write_text("{{ messages }}")
    tokenizer = tmp_path / "tok"
    tokenizer.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tokenizer / name).write_bytes((tiny_model_dir / name).read_bytes())
    (tokenizer / "model.safetensors").write_text("weights are not read")
    study = sim_study(
        tmp_path,
        tokenizer,
        flags={"chat-template": str(template)},
        workload={"dataset_name": "jsonl", "dataset_path": str(dataset)},
    )
    first = load_study_spec(study).model_dump()
    assert load_study_spec(study).model_dump() == first  # the same files: the same spec

    def edit(path: Path, text: str) -> list[str]:
        saved = path.read_bytes()
        path.write_text(text)
        try:
            now = load_study_spec(study).model_dump()
            assert specs.spec_id(now) != specs.spec_id(first)
            return specs.changes(first, now)
        finally:
            path.write_bytes(saved)

    assert edit(dataset, '{"prompt": "bye", "output_len": 4}\n') == [
        "workload.dataset_path: the file's contents changed"
    ]
    assert edit(template, "{{ other }}") == [
        "engine.flags.chat-template: the file's contents changed"
    ]
    changed = edit(tokenizer / "tokenizer_config.json", "{}")
    assert "workload.tokenizer: the file's contents changed" in changed
    assert "engine.flags.tokenizer: the file's contents changed" in changed
    # weights are not read: editing them leaves the spec alone
    (tokenizer / "model.safetensors").write_text("other weights")
    assert specs.spec_id(load_study_spec(study).model_dump()) == specs.spec_id(first)


def test_file_contents_written_in_the_study_file_are_replaced(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """A dumped spec read back (as tests and scripts do) holds what the files hold now."""
    assert tuner("sim", "profile", "a6000", "-o", "prof.yaml", cwd=tmp_path).returncode == 0
    study = sim_study(
        tmp_path,
        tiny_model_dir,
        hardware={"profile": "prof.yaml", "count": 4},
        file_contents={"hardware.profile": "sha256:0000", "engine.flags.nosuch": "x"},
    )
    found = load_study_spec(study).file_contents
    assert found["hardware.profile"] not in ("sha256:0000", None)
    assert "engine.flags.nosuch" not in found

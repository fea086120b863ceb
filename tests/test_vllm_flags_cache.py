"""vLLM's flag list is asked once per installed vLLM: kept under $XDG_CACHE_HOME, asked again
when the package changes (a stand-in python counts how often it is asked)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tuner.engine.vllm_flags import VllmFlags, vllm_flags


def _fake_venv(root: Path) -> tuple[Path, Path, Path]:
    """A venv-shaped folder whose `python` answers the probe and counts its calls."""
    package = root / "lib" / "python3.11" / "site-packages" / "vllm"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("__version__ = '9.9'\n")
    calls = root / "calls"
    python = root / "bin" / "python"
    python.parent.mkdir()
    answer = json.dumps({"version": "9.9", "flags": ["--max-num-seqs", "--block-size"]})
    python.write_text(f"#!/bin/sh\necho x >> {calls}\necho '{answer}'\n")
    python.chmod(0o755)
    return python, package / "__init__.py", calls


def test_the_flag_list_is_cached_per_installed_vllm(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    python, init, calls = _fake_venv(tmp_path / "venv")
    first = vllm_flags(str(python))
    assert first == VllmFlags("9.9", frozenset({"max-num-seqs", "block-size"}), str(python))
    assert vllm_flags(str(python)) == first
    assert len(calls.read_text().splitlines()) == 1  # the second answer came from the cache
    assert list((tmp_path / "cache" / "tuner" / "vllm-flags").glob("*.json"))
    os.utime(init, ns=(1, 1))  # vLLM reinstalled or upgraded: asked again
    assert vllm_flags(str(python)) == first
    assert len(calls.read_text().splitlines()) == 2


def test_a_failed_probe_is_not_cached(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    python, _, calls = _fake_venv(tmp_path / "venv")
    python.write_text(f"#!/bin/sh\necho x >> {calls}\necho 'No module named vllm' >&2\nexit 1\n")
    assert vllm_flags(str(python)) == "No module named vllm"
    assert vllm_flags(str(python)) == "No module named vllm"
    assert len(calls.read_text().splitlines()) == 2
    assert not (tmp_path / "cache" / "tuner").exists()

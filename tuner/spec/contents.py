"""The contents of the files a study file names, as digests: part of what a trial measures.

A study file names some inputs by path (the hardware profile, datasets, tokenizer files, a
chat template); an edit under the same path changes the measurement, not the study file.
Which files, and what of a directory, is read: docs/study-file.md, "Files the spec covers".

What callers may assume: `file_contents` gives each named file a digest of its contents and
the loaded spec carries them, so the spec id (`tuner.trial.specs`) changes when a file's
contents do; model weights are never read (a changed checkpoint is a new model path); a path
that does not exist is left out (a hub model, or a file that other checks report), its name
being part of the spec anyway.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tuner.spec.coherence import StudySections

# Files of a tokenizer (and a model directory's chat template) that change how text becomes
# tokens, or how chat messages become a prompt.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "tokenizer.model",
    "spiece.model",
    "chat_template.jinja",
    "chat_template.json",
)
_CHUNK = 1 << 20


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def digest(path: Path) -> str | None:
    """`sha256:<16 hex>` of a file, or of a directory's tokenizer files (names and contents);
    None when the path is not a readable local file or directory."""
    try:
        if path.is_file():
            return "sha256:" + _file_digest(path)[:16]
        if path.is_dir():
            h = hashlib.sha256()
            for name in TOKENIZER_FILES:
                if (path / name).is_file():
                    h.update(f"{name}\0{_file_digest(path / name)}\0".encode())
            return "sha256:" + h.hexdigest()[:16]
    except (OSError, ValueError):  # unreadable, or a name the OS refuses
        return None
    return None


def _named_paths(spec: StudySections) -> Iterable[tuple[str, str]]:
    """(where in the study file, path) of every input the spec names by path."""
    if spec.hardware.profile:
        yield "hardware.profile", spec.hardware.profile
    workloads = [("workload", spec.workload)]
    workloads += [(f"workload.{s.name}", s) for s in spec.scenarios]
    for where, w in workloads:
        if w.dataset_path:
            yield f"{where}.dataset_path", w.dataset_path
        if w.tokenizer:
            yield f"{where}.tokenizer", w.tokenizer
    yield "engine.model", spec.engine.model
    for flag, value in spec.engine.flags.items():
        if isinstance(value, str):
            yield f"engine.flags.{flag}", value


def file_contents(spec: StudySections) -> dict[str, str]:
    """{where in the study file: digest} of every named input that is a local path."""
    out = {}
    for where, value in _named_paths(spec):
        if not value or len(value) > 4096:
            continue
        found = digest(Path(value).expanduser())
        if found is not None:
            out[where] = found
    return out

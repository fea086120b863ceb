"""Load a Hugging Face tokenizer from a local directory, never from the network."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tuner.errors import UserError


def load_tokenizer(path: str) -> Any:
    """transformers' AutoTokenizer from `path`, offline; a missing or bad dir is a UserError."""
    directory = Path(path).expanduser()
    if not directory.is_dir():
        raise UserError(f"tokenizer directory not found: {path}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    # Imported here: transformers takes seconds to import, and its env vars must be set first.
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise UserError(f"cannot load a tokenizer from {path}: {first_line}") from exc

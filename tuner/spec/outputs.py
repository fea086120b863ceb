"""Files and folders the tuner writes where a user asks (`-o`, `--save-result`, a model
folder): checked before the work that fills them, so a bad path is one line, at once."""

from __future__ import annotations

import os
from pathlib import Path

from tuner.errors import UserError


def check_output_file(path: str | Path, what: str) -> None:
    """A file that can be written: not a folder, in a folder that exists and is writable."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{what} {path}: is a directory; give a file name")
    if not path.parent.is_dir():
        raise UserError(f"{what} {path}: the directory {path.parent} does not exist")
    if not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UserError(f"{what} {path}: not writable")


def write_output_file(path: str | Path, text: str, what: str) -> None:
    """Write `text` to a file checked as above; an OS refusal is one line too."""
    check_output_file(path, what)
    try:
        Path(path).write_text(text)
    except OSError as exc:
        raise UserError(f"{what} {path}: cannot write: {exc.strerror or exc}") from None


def make_output_dir(path: str | Path, what: str) -> Path:
    """A folder to write into, created with its parents when missing; a path that is a file,
    or a place where no folder can be made (`/proc/x`), is one line."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserError(f"{what} {path}: exists and is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{what} {path}: cannot create the directory: {exc.strerror}") from None
    if not os.access(path, os.W_OK):
        raise UserError(f"{what} {path}: the directory is not writable")
    return path

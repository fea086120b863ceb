"""Files and folders the tuner writes where a user asks (`-o`, `--save-result`, `--png`, a model
folder): checked before the work that fills them, so a bad path is one line, at once.

One rule for every file a command writes (`check_output_file`, `write_output_file`): new files
are written, a regular file is replaced with `--force` only, and some paths never, whatever the
flags (not a regular file, or a link to one; any SQLite database, known by its header; the files
the caller names as its own, `keep`: the study file and its database). The rule as users meet
it: "Files the results commands write" in docs/results.md.

The file is opened without truncating, checked again on the open descriptor (what it really is,
whatever the path pointed at when it was first checked), and only then emptied and written;
without `--force` it is created exclusively (a file that appears meanwhile is not replaced).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

from tuner.errors import UserError

SQLITE_HEADER = b"SQLite format 3\x00"  # the first bytes of every SQLite database file

# A file the writing command must never replace, and what it is in words: (path, "the study file")
Kept = tuple[Path, str]


def check_output_file(
    path: str | Path, what: str, *, force: bool = False, keep: Sequence[Kept] = ()
) -> None:
    """A file that may be written: new, or a regular file with `force` that is none of `keep`;
    in a folder that exists and is writable."""
    path = Path(path)
    try:
        found: os.stat_result | None = path.stat()  # through a link: what would be written
    except FileNotFoundError:
        found = None
        if path.is_symlink():
            raise UserError(f"{what} {path}: a link to nothing; give a file name") from None
    except OSError as exc:
        raise UserError(f"{what} {path}: {exc.strerror or exc}") from None
    if found is not None:
        _check_existing(path, found, what, force, keep)
    folder = path.parent
    if not folder.is_dir():
        raise UserError(f"{what} {path}: the directory {folder} does not exist")
    if not os.access(folder, os.W_OK) or (found is not None and not os.access(path, os.W_OK)):
        raise UserError(f"{what} {path}: not writable")


def _check_existing(
    path: Path, found: os.stat_result, what: str, force: bool, keep: Sequence[Kept]
) -> None:
    if stat.S_ISDIR(found.st_mode):
        raise UserError(f"{what} {path}: is a directory; give a file name")
    if not stat.S_ISREG(found.st_mode):
        raise UserError(
            f"{what} {path}: not a regular file (a device, a pipe or a socket): never "
            "written over, even with --force; give a file name"
        )
    for other, name in keep:
        if _same(found, other):
            raise UserError(
                f"{what} {path}: is {name}: never written over, even with --force; "
                "give another file name"
            )
    if _is_database(path):
        raise UserError(
            f"{what} {path}: is a SQLite database: never written over, even with --force; "
            "give another file name"
        )
    if not force:
        raise UserError(f"{what} {path}: exists; give another file name, or --force to replace it")


def _is_database(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:  # unreadable: the write's own check says so
        return False


def _same(found: os.stat_result, other: Path) -> bool:
    try:
        kept = other.stat()
    except OSError:
        return False
    return (kept.st_dev, kept.st_ino) == (found.st_dev, found.st_ino)


def write_output_file(
    path: str | Path,
    data: str | bytes,
    what: str,
    *,
    force: bool = False,
    keep: Sequence[Kept] = (),
) -> None:
    """Write `data` (text as UTF-8) to a file that passes `check_output_file`; what the path
    turns out to be once open is checked again before a byte is written or emptied."""
    check_output_file(path, what, force=force, keep=keep)
    path = Path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    flags |= 0 if force else os.O_EXCL
    try:
        fd = os.open(path, flags, 0o666)
    except FileExistsError:
        raise UserError(f"{what} {path}: exists; give another file name, or --force") from None
    except OSError as exc:
        raise UserError(f"{what} {path}: cannot write: {exc.strerror or exc}") from None
    try:
        _check_existing(path, os.fstat(fd), what, True, keep)  # what it is, once open
        os.set_blocking(fd, True)
        os.ftruncate(fd, 0)
        body = data.encode("utf-8") if isinstance(data, str) else data
        view = memoryview(body)
        while view:
            view = view[os.write(fd, view) :]
    except OSError as exc:
        raise UserError(f"{what} {path}: cannot write: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


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

"""The study file the commands an output suggests name (pure): `tuner run FILE --confirm K`,
`tuner verify FILE`. Its own module so that `verdicts` and `recommend`, which imports
`verdicts`, both read it without a cycle."""

from __future__ import annotations

import shlex
from contextvars import ContextVar

# the study file as the command was given it: each command that reads a stored study sets it
# (`tuner.commands.common.open_stored_study_files`), so the commands these words suggest name
# the user's file; a caller that set none (a library, a test) reads the placeholder
STUDY_FILE: ContextVar[str] = ContextVar("study_file", default="STUDY.yaml")


def study_file_words() -> str:
    """The study file for a suggested command, shell-quoted (`STUDY_FILE`)."""
    return shlex.quote(STUDY_FILE.get())

"""Write the study `tuner init` drafted: its comment lines (what was chosen and why), then the
YAML, checked by reading it back with `load_study_spec` as `tuner run` will, then put in place.

An existing file is never replaced unless asked (`force`); without it the file appears only if
no other has appeared there meanwhile (a hard link, which fails on an existing name).
"""

from __future__ import annotations

import os
import shlex
import tempfile
import textwrap
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import yaml

from tuner.errors import UserError
from tuner.scaffold.draft import shared_paths
from tuner.scaffold.options import check_output
from tuner.scaffold.study import Draft
from tuner.spec.study import load_study_spec


class _Dumper(yaml.SafeDumper):
    """Block style, except lists of plain values on one line (`command: [vllm, serve]`)."""


def _list(dumper: yaml.SafeDumper, items: list[object]) -> yaml.Node:
    flow = all(isinstance(item, str | int | float | bool) for item in items)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", items, flow_style=flow)


_Dumper.add_representer(list, _list)


def next_commands(path: Path) -> list[str]:
    """What to run on the study file next, each a shell command (the path quoted as a shell
    reads it: a space or a quote in it is one argument)."""
    return [shlex.join(["tuner", verb, str(path)]) for verb in ("check", "run", "best")]


def render(draft: Draft, path: Path) -> str:
    """The study file's text: the notes as comments, then the YAML."""
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    head = [f"Written by `tuner init` on {when}.", *draft.notes]
    head += ["Next:", *(f"  {command}" for command in next_commands(path))]
    wrap = partial(textwrap.wrap, width=98, subsequent_indent="  ", break_on_hyphens=False)
    comments = "".join(f"# {part}\n" for line in head for part in wrap(line) or [""])
    data = shared_paths(draft.data, path.resolve().parent)
    body = yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)
    return comments + body


def write_study(draft: Draft, path: Path, force: bool) -> None:
    """Write `draft` to `path`, read it back as a study file, then put it in place."""
    check_output(path, force)
    text = render(draft, path)
    folder = path.resolve().parent
    fd, temp = tempfile.mkstemp(prefix=".tuner-init-", suffix=".yaml", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        mask = os.umask(0o022)
        os.umask(mask)
        os.chmod(temp, 0o666 & ~mask)  # as a file written in place would be, not mkstemp's 0600
        load_study_spec(temp)  # as `tuner run` will read it: a refusal here is a bug
        if force:
            check_output(path, force)  # still a regular file: never a device or a folder
            os.replace(temp, path)
        else:
            try:
                os.link(temp, path)
            except FileExistsError:
                raise UserError(f"{path} exists: give another -o FILE, or --force") from None
    finally:
        Path(temp).unlink(missing_ok=True)

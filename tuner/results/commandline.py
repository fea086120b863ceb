"""A config as production runs it: the `vllm serve` shell command and the `--config` mapping.

Every word is shell-quoted; comments stay comments whatever a value holds (a model path with a
line break). Shared by `tuner export`, `tuner best` and the report's "What to deploy".
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence

from tuner.errors import UserError
from tuner.spec.inputs import POSIX_NAME
from tuner.spec.parts import Serving
from tuner.spec.space import serve_argv, serve_config, serve_env
from tuner.spec.values import Params


def env_assignments(env: dict[str, str], quote: Callable[[str], str] = shlex.quote) -> list[str]:
    """`NAME=value` words for a shell: the value quoted, the name checked (a quoted name is no
    assignment, so a name that is not a POSIX name is refused, not written)."""
    out = []
    for name, value in env.items():
        if not POSIX_NAME.fullmatch(name):
            raise UserError(f"env name {name!r} is not a POSIX name: it cannot be exported")
        out.append(f"{name}={quote(str(value))}")
    return out


_BREAKS = {"\x85", "\u2028", "\u2029", "\x7f"}  # line breaks to YAML or Python, and DEL


def one_line_quote(value: str) -> str:
    """`shlex.quote`, except that a value holding a control character or a line break is
    written `$'...'` (bash, zsh, ksh; POSIX.1-2024), so that it stays on one comment line."""
    value = str(value)
    if not any(ord(c) < 32 or c in _BREAKS for c in value):
        return shlex.quote(value)
    out = []
    for c in value:
        if c in "\\'":
            out.append("\\" + c)
        elif ord(c) < 32 or c in _BREAKS:
            out.extend(f"\\x{b:02x}" for b in c.encode())  # UTF-8 bytes: any locale
        else:
            out.append(c)
    return "$'" + "".join(out) + "'"


def shell_command(spec: Serving, params: Params) -> str:
    """`VAR=value vllm serve MODEL \\` then one flag per line, every word shell-quoted."""
    env = env_assignments(serve_env(spec, params))
    argv = serve_argv(spec, params)
    words = [*env, *(shlex.quote(a) for a in argv[:3])]
    lines = [" ".join(words)]
    for arg in argv[3:]:
        if arg.startswith("--") or len(lines) == 1:
            lines.append(shlex.quote(arg))
        else:
            lines[-1] += " " + shlex.quote(arg)
    return " \\\n  ".join(lines)


def vllm_config(spec: Serving, params: Params) -> dict[str, object]:
    """The `--config` mapping. A false bool is written `no-<flag>: true`: vLLM's config loader
    looks `--no-<flag>` up on the top-level parser, where serve's flags are missing, and
    silently drops `<flag>: false` (checked on vLLM 0.32)."""
    out: dict[str, object] = {}
    for key, value in serve_config(spec, params).items():
        if value is False:
            out[f"no-{key}"] = True
        else:
            out[key] = value
    return out


def comment(lines: Sequence[str]) -> str:
    """Comment lines; a line break inside a value (a model path, a GPU name) stays commented,
    so nothing of the study file ends up as a command when the export is sourced."""
    return "".join(
        f"# {part}".rstrip() + "\n" for line in lines for part in (line.splitlines() or [""])
    )

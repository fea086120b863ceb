"""The flags an engine accepts, asked of vLLM's own argument parser in the engine's python.

`vllm serve` builds its parser with `make_arg_parser(FlexibleArgumentParser())`
(`vllm.entrypoints.launchers.cli_args` in vLLM 0.3x, `vllm.entrypoints.openai.cli_args` before),
which adds the frontend's and `AsyncEngineArgs.add_cli_args`' flags. A subprocess of the
engine's python builds it and prints the long option names: vLLM imports torch, so this takes
seconds (a minute on a loaded box); `tuner run --no-preflight` skips it.

Each answer is cached per python and per installed vLLM (`_cache_file`): where, and what the key
holds, is docs/preflight.md; an upgrade is asked again, a failed probe is not kept.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

PROBE_TIMEOUT_S = 300.0
_PYTHON = re.compile(r"python(\d+(\.\d+)?)?")
_PROBE = """
import importlib, json
import vllm
try:
    from vllm.utils.argparse_utils import FlexibleArgumentParser
except ImportError:
    from vllm.utils import FlexibleArgumentParser
parser = None
for name in ("vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args"):
    try:
        parser = importlib.import_module(name).make_arg_parser(FlexibleArgumentParser())
        break
    except (ImportError, AttributeError):
        continue
if parser is None:
    from vllm.engine.arg_utils import AsyncEngineArgs
    parser = AsyncEngineArgs.add_cli_args(FlexibleArgumentParser())
names = sorted({o for a in parser._actions for o in a.option_strings if o.startswith("--")})
print(json.dumps({"version": getattr(vllm, "__version__", "?"), "flags": names}))
"""


@dataclass(frozen=True)
class VllmFlags:
    """The long flags (without dashes) of one installed vLLM's `vllm serve`."""

    version: str
    names: frozenset[str]
    python: str


def executable(command: list[str], model: str) -> str:
    """The engine command's program, `{python}` and `{model}` substituted."""
    return command[0].format(model=model, python=sys.executable)


def is_simulated_engine(command: list[str]) -> bool:
    """`tuner sim serve` (as `tuner sim serve` or `python -m tuner.cli sim serve`)."""
    for i in range(len(command) - 2):
        if Path(command[i]).name in ("tuner", "tuner.cli") and command[i + 1 : i + 3] == [
            "sim",
            "serve",
        ]:
            return True
    return False


def engine_python(command: list[str], model: str) -> str | None:
    """The python the engine runs in: the command's own program when it is a python, else
    the interpreter of the script it names (`vllm`'s shebang); None when not found."""
    found = shutil.which(executable(command, model))
    if found is None:
        return None
    if _PYTHON.fullmatch(Path(found).name):
        return found
    try:
        with open(found, "rb") as f:
            first = f.readline(512).decode("utf-8", "replace")
    except OSError:
        return None
    if not first.startswith("#!"):
        return None
    parts = first[2:].split()
    if parts and Path(parts[0]).name == "env" and len(parts) > 1:
        parts = [shutil.which(parts[1]) or parts[1]]
    return parts[0] if parts and _PYTHON.fullmatch(Path(parts[0]).name) else None


def vllm_flags(python: str, timeout_s: float = PROBE_TIMEOUT_S) -> VllmFlags | str:
    """vLLM's `vllm serve` flags as that python's vLLM parses them, or why they cannot be had
    (one line: vLLM not importable, the probe failed or timed out); from the cache when this
    python's vLLM was asked before."""
    cache = _cache_file(python)
    if cache is not None:
        try:
            data = json.loads(cache.read_text(encoding="utf-8"))
            return VllmFlags(str(data["version"]), frozenset(data["flags"]), python)
        except (OSError, ValueError, KeyError, TypeError):
            pass
    found = _probe(python, timeout_s)
    if cache is not None and isinstance(found, VllmFlags):
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            data = {"version": found.version, "flags": sorted(found.names)}
            tmp = cache.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(data), encoding="utf-8")
            tmp.replace(cache)  # atomic: a concurrent reader sees the old file or the new
        except OSError:
            pass  # a cache that cannot be written costs the next probe, nothing else
    return found


def _cache_file(python: str) -> Path | None:
    """Where this python's vLLM flags are kept; None when its vLLM package is not found where
    a virtual environment keeps it (then every check asks vLLM)."""
    exe = Path(python).absolute()
    inits = sorted(exe.parent.parent.glob("lib/python3*/site-packages/vllm/__init__.py"))
    if not inits:
        return None
    try:
        st = inits[0].stat()
    except OSError:
        return None
    key = f"{exe}|{inits[0]}|{st.st_size}|{st.st_mtime_ns}"
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "tuner" / "vllm-flags" / (hashlib.sha256(key.encode()).hexdigest()[:16] + ".json")


def _probe(python: str, timeout_s: float) -> VllmFlags | str:
    """Ask vLLM in a subprocess of `python`."""
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "ERROR", "TRANSFORMERS_VERBOSITY": "error"}
    try:
        done = subprocess.run(
            [python, "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return f"{python} did not build vLLM's argument parser within {timeout_s:.0f} s"
    except OSError as exc:
        return f"{python} does not run ({exc.strerror})"
    lines = done.stdout.strip().splitlines()
    if done.returncode == 0 and lines:
        try:
            data = json.loads(lines[-1])
            names = frozenset(str(n).removeprefix("--") for n in data["flags"])
            return VllmFlags(str(data["version"]), names, python)
        except (ValueError, KeyError, TypeError):
            pass
    errors = [line for line in done.stderr.strip().splitlines() if line.strip()]
    return errors[-1] if errors else f"{python} exited with {done.returncode}"

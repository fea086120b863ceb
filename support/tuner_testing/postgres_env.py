"""A PostgreSQL server for the tests: found, or installed (`make postgres`).

The multi-worker tests (tests/test_scale_out.py) and benchmarks/scale_out.py start a
throw-away server of their own (`tuner_testing.PostgresServer`); this finds its programs and,
where there are none, installs them. Found: `initdb` on PATH (its real directory), else the
newest Debian server under /usr/lib/postgresql/<version>/bin. Not found, as root on Debian (as
CI runs): `apt-get install postgresql`. As root the server runs as the `postgres` system user
(it refuses to run as root); the package creates it, and this adds it if a server came
without it. Idempotent; docs/scale-out.md, "The tests' PostgreSQL".

Usage: `python support/tuner_testing/postgres_env.py` (prints one line: the version and where
it is). It imports only the standard library, so that it also runs as a plain script in a bare
root.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

PG_USER = "postgres"  # the system user the server runs as when the tests run as root
DEBIAN_BIN_GLOB = "/usr/lib/postgresql/*/bin"  # where Debian's postgresql-NN puts the server
SERVER_EXES = ("initdb", "pg_ctl", "postgres")
APT_PACKAGE = "postgresql"  # Debian's "supported version" metapackage (15 on bookworm)
_SBIN = "/usr/local/sbin:/usr/sbin:/sbin"  # runuser and useradd, when PATH lacks them


def server_bin_dir() -> Path | None:
    """The directory of the PostgreSQL server programs: that of `initdb` on PATH, else the
    newest Debian version under /usr/lib/postgresql; None when there is none."""
    on_path = shutil.which("initdb")
    candidates = [Path(on_path).resolve().parent] if on_path else []
    debian = Path("/").glob(DEBIAN_BIN_GLOB.lstrip("/"))
    candidates += sorted(debian, key=lambda d: _version_key(d.parent.name), reverse=True)
    for d in candidates:
        if all(os.access(d / exe, os.X_OK) for exe in SERVER_EXES):
            return d
    return None


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", name)) or (0,)


def system_tool(name: str) -> str | None:
    """A system program (`runuser`, `useradd`) on PATH or in the sbin directories."""
    return shutil.which(name, path=f"{os.environ.get('PATH', '')}:{_SBIN}")


def postgres_missing() -> str | None:
    """Why a throw-away PostgreSQL cannot be started here, or None when it can."""
    if server_bin_dir() is None:
        return (
            f"no initdb/pg_ctl/postgres on PATH nor in {DEBIAN_BIN_GLOB} "
            "(run `make postgres`; Debian: apt-get install postgresql)"
        )
    if os.geteuid() == 0:
        if system_tool("runuser") is None:
            return "running as root without runuser: cannot start PostgreSQL as another user"
        if not _user_exists(PG_USER):
            return f"running as root and no {PG_USER!r} system user to run PostgreSQL as"
    return None


def _user_exists(name: str) -> bool:
    import pwd

    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def ensure() -> str:
    """Make a throw-away PostgreSQL startable here, installing it as root if need be; one
    line saying which and where. Raises RuntimeError when it cannot."""
    t0 = time.monotonic()
    how = "found"
    if server_bin_dir() is None:
        _apt_install()
        how = f"installed Debian's {APT_PACKAGE} with apt-get in {time.monotonic() - t0:.0f} s"
    useradd = system_tool("useradd")
    if os.geteuid() == 0 and not _user_exists(PG_USER) and useradd is not None:
        subprocess.run([useradd, "--system", "--no-create-home", PG_USER], check=True)
    why = postgres_missing()
    if why is not None:
        raise RuntimeError(why)
    bin_dir = server_bin_dir()
    assert bin_dir is not None  # postgres_missing() found it
    version = subprocess.run(
        [str(bin_dir / "postgres"), "--version"], capture_output=True, text=True, check=True
    ).stdout.strip()
    return f"{version} at {bin_dir} ({how})"


def _apt_install() -> None:
    apt = system_tool("apt-get")
    if os.geteuid() != 0 or apt is None:
        raise RuntimeError(
            f"no PostgreSQL server on PATH nor in {DEBIAN_BIN_GLOB}, and apt-get cannot install "
            "one here (not root, or not Debian): install PostgreSQL (Debian: sudo apt-get "
            "install postgresql) or put its bin directory on PATH"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (
        [apt, "update", "-q"],
        [apt, "install", "-y", "-q", "--no-install-recommends", APT_PACKAGE],
    ):
        subprocess.run(argv, check=True, env=env, stdout=sys.stderr)


def main() -> int:
    try:
        print(f"postgres: {ensure()}")
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        print(f"postgres: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

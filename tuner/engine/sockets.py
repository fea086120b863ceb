"""A private folder for the engine's IPC sockets, removed once the engine has stopped.

vLLM's processes talk over ZMQ IPC sockets under `VLLM_RPC_BASE_PATH` (`get_open_zmq_ipc_path`
in `vllm/utils/network_utils.py`; the base defaults to the system's temp folder, `vllm/envs.py`;
docs/engine.md). A stopped vLLM 0.32 leaves them behind: 2–3 socket files in /tmp per start,
measured on the CPU build, so an overnight study would strew hundreds. Each engine start gets
its own short folder under the temp folder instead (a socket's path must stay under 108 bytes),
and the folder goes with the engine. A base the user set (in the study's env or the tuner's own)
is theirs: left as it is.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

RPC_BASE_ENV = "VLLM_RPC_BASE_PATH"


@contextmanager
def private_ipc_dir(env: dict[str, str]) -> Iterator[str | None]:
    """Set `VLLM_RPC_BASE_PATH` in `env` to a new folder for the engine's life; remove it after.
    Yields the folder, or None when the user's own base applies."""
    if RPC_BASE_ENV in env or RPC_BASE_ENV in os.environ:
        yield None
        return
    folder = tempfile.mkdtemp(prefix="tuner-ipc-")
    env[RPC_BASE_ENV] = folder
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)

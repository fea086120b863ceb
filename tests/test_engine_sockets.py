"""`tuner.engine.sockets`: each engine start's IPC sockets in a folder of their own, removed
after the stop; a base the user set is left alone."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tuner.engine.sockets import RPC_BASE_ENV, private_ipc_dir


def test_the_folder_is_named_in_the_env_and_goes_with_its_sockets(monkeypatch) -> None:
    monkeypatch.delenv(RPC_BASE_ENV, raising=False)
    env: dict[str, str] = {"OTHER": "1"}
    with private_ipc_dir(env) as folder:
        assert folder is not None and env[RPC_BASE_ENV] == folder
        path = Path(folder) / "0f1e2d3c-socket"  # as vLLM names one: <base>/<uuid4>
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(str(path))  # left behind, as a stopped vLLM leaves its own
        assert path.is_socket()
        assert len(str(path)) < 108  # AF_UNIX's limit, with a uuid4's 36 characters
    assert not Path(folder).exists()


def test_a_base_the_user_set_is_theirs(monkeypatch, tmp_path: Path) -> None:
    env = {RPC_BASE_ENV: str(tmp_path)}
    with private_ipc_dir(env) as folder:
        assert folder is None and env[RPC_BASE_ENV] == str(tmp_path)
    assert tmp_path.exists()
    monkeypatch.setenv(RPC_BASE_ENV, str(tmp_path))
    env = {}
    with private_ipc_dir(env) as folder:
        assert folder is None and RPC_BASE_ENV not in env


def test_the_folder_goes_even_when_the_trial_raises(monkeypatch) -> None:
    monkeypatch.delenv(RPC_BASE_ENV, raising=False)
    with pytest.raises(RuntimeError), private_ipc_dir({}) as folder:
        raise RuntimeError("the engine died")
    assert not Path(folder).exists()

"""Who holds a port: the LISTEN sockets of /proc/net/tcp{,6} matched to a process's open files."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from tuner.engine import ports

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")


def test_port_belongs_to_someone_else_is_told_from_ours_and_nobody() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        assert ports.port_holder("127.0.0.1", port, [os.getpid()]) == ports.NOBODY  # bound only
        sock.listen()
        assert ports.listening_inodes("127.0.0.1", port) == {os.fstat(sock.fileno()).st_ino}
        assert ports.port_holder("127.0.0.1", port, [os.getpid()]) == ports.OURS
        assert ports.port_holder("localhost", port, [os.getpid()]) == ports.OURS
        assert ports.port_holder("127.0.0.1", port, [1]) == ports.FOREIGN
        assert ports.port_holder("127.0.0.1", port, []) == ports.FOREIGN
        assert f"pid {os.getpid()} " in ports.describe_holders("127.0.0.1", port)
        assert ports.describe_holders("127.0.0.1", port, exclude=[os.getpid()]) == ""
    assert ports.port_holder("127.0.0.1", port, [os.getpid()]) == ports.NOBODY


@pytest.mark.parametrize(
    ("family", "wildcard"), [(socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")]
)
def test_port_belongs_to_someone_else_on_a_wildcard_address(family, wildcard: str) -> None:
    """A server on 0.0.0.0 or [::] (dual-stack) also takes connections to 127.0.0.1."""
    with socket.socket(family) as sock:
        sock.bind((wildcard, 0))  # a kernel without IPv6 fails here: the test, not a skip
        sock.listen()
        port = sock.getsockname()[1]
        assert ports.port_holder("127.0.0.1", port, [1]) == ports.FOREIGN
        assert ports.port_holder("127.0.0.1", port, [os.getpid()]) == ports.OURS


def test_port_belongs_to_someone_else_when_sharing_it_through_so_reuseport() -> None:
    """Two listeners on one port (SO_REUSEPORT, as vLLM with several API servers sets) share
    its connections: the port is ours only when every listener is."""
    ours = socket.socket()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    ours.bind(("127.0.0.1", 0))
    ours.listen()
    port = ours.getsockname()[1]
    code = (
        "import socket, sys, time\n"
        "s = socket.socket()\n"
        "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)\n"
        f"s.bind(('127.0.0.1', {port})); s.listen(); print('up', flush=True); time.sleep(60)\n"
    )
    other = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "up"
        assert len(ports.listening_inodes("127.0.0.1", port)) == 2
        assert ports.port_holder("127.0.0.1", port, [os.getpid()]) == ports.FOREIGN
        assert ports.port_holder("127.0.0.1", port, [os.getpid(), other.pid]) == ports.OURS
        assert f"pid {other.pid} " in ports.describe_holders("127.0.0.1", port, [os.getpid()])
    finally:
        other.kill()
        other.wait()
        ours.close()


def test_port_belongs_to_someone_else_unknown_without_proc(monkeypatch) -> None:
    monkeypatch.setattr(ports, "listening_inodes", lambda host, port: None)
    assert ports.port_holder("127.0.0.1", 1, []) == ports.UNKNOWN

"""Loopback ports for engines: pick a free one, and wait until a stopped engine released its own."""

from __future__ import annotations

import socket
import time


def free_port(host: str = "127.0.0.1") -> int:
    """A port that nothing listens on now (the OS picks it; another process may still race us)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def port_is_free(host: str, port: int) -> bool:
    """True when a server could bind `host:port` now.

    SO_REUSEADDR is set as uvicorn sets it, so connections left in TIME_WAIT by a stopped
    engine do not count as busy: only a bound or listening socket does.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def wait_port_free(host: str, port: int, timeout_s: float, *, poll_s: float = 0.1) -> bool:
    """Poll until `host:port` can be bound; False if it is still taken after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        if port_is_free(host, port):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)

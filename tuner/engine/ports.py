"""Loopback ports for engines: pick a free one, wait until a stopped engine released its own,
and tell whose process listens on one."""

from __future__ import annotations

import ipaddress
import os
import socket
import sys
import time
from collections.abc import Collection
from pathlib import Path


def free_port(host: str = "127.0.0.1") -> int:
    """A port that nothing listens on now (the OS picks it; another process may still race us)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


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


# Who holds a port (Linux): the LISTEN sockets in /proc/net/tcp{,6} and the processes whose
# open files include them. Readiness uses it to prove the server that answers is the engine.

OURS, NOBODY, FOREIGN, UNKNOWN = "ours", "nobody", "foreign", "unknown"
_TCP_LISTEN = "0A"
_WILDCARDS = (ipaddress.ip_address("0.0.0.0"), ipaddress.ip_address("::"))


def _proc_address(hex_addr: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An address as /proc/net/tcp prints it: 32-bit words in the kernel's byte order."""
    raw = bytes.fromhex(hex_addr)
    if sys.byteorder == "little":
        raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    addr = ipaddress.ip_address(raw)
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


def _host_addresses(host: str, port: int) -> set[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The addresses a client connecting to `host` may reach (a name can resolve to several)."""
    try:
        return {ipaddress.ip_address(host)}
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return set()
    # an IP socket's sockaddr starts with the address as text ("fe80::1%eth0": the scope cut)
    return {ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos}


def listening_inodes(host: str, port: int) -> set[int] | None:
    """Inodes of the LISTEN sockets that can accept a connection to `host:port`: bound to one
    of its addresses or to a wildcard (0.0.0.0, ::). None where /proc/net/tcp is unreadable."""
    wanted = _host_addresses(host, port)
    found: set[int] = set()
    readable = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        readable = True
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _TCP_LISTEN:
                continue
            addr_hex, port_hex = fields[1].split(":")
            if int(port_hex, 16) != port:
                continue
            addr = _proc_address(addr_hex)
            if addr in wanted or addr in _WILDCARDS:
                found.add(int(fields[9]))
    return found if readable else None


def socket_inodes(pid: int) -> set[int]:
    """Inodes of the sockets process `pid` has open (empty when it is gone or not readable)."""
    inodes: set[int] = set()
    try:
        entries = list(os.scandir(f"/proc/{pid}/fd"))
    except OSError:
        return inodes
    for entry in entries:
        try:
            target = os.readlink(entry.path)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def port_holder(host: str, port: int, pids: list[int]) -> str:
    """Whether the processes `pids` hold every listening socket of `host:port`.

    OURS: there is one and all are theirs; NOBODY: nothing listens; FOREIGN: some other
    process listens (alone, or beside them through SO_REUSEPORT, sharing the connections);
    UNKNOWN: this system does not tell (no /proc).
    """
    listening = listening_inodes(host, port)
    if listening is None:
        return UNKNOWN
    if not listening:
        return NOBODY
    held: set[int] = set()
    for pid in pids:
        held |= socket_inodes(pid)
        if listening <= held:
            return OURS
    return FOREIGN


def describe_holders(host: str, port: int, exclude: Collection[int] = ()) -> str:
    """The processes outside `exclude` that listen on `host:port`, as "pid 123 (python3)",
    as far as /proc lets us see them; "" when none can be named."""
    listening = listening_inodes(host, port)
    if not listening:
        return ""
    names = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) in exclude:
            continue
        if socket_inodes(int(entry.name)) & listening:
            try:
                comm = Path(entry.path, "comm").read_text().strip()
            except OSError:
                comm = "?"
            names.append(f"pid {entry.name} ({comm})")
    return ", ".join(names[:3])

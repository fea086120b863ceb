"""Another process's OpenAI-compatible server on a loopback port: the port's rightful owner.

It answers `/health`, `/v1/models` (the sim study's served name), `/version` and streams a
plausible completion to any POST, so a tuner that took it for its engine would "measure" it.
Every POST is counted in `posts`, which must stay 0.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

FOREIGN_VERSION = "foreign-9.9"

_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    model, count_file, version = sys.argv[1:4]

    class Handler(BaseHTTPRequestHandler):
        def _json(self, body):
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/health":
                return self._json({})
            if self.path == "/v1/models":
                return self._json({"object": "list", "data": [{"id": model}]})
            if self.path == "/version":
                return self._json({"version": version})
            self.send_error(404)

        def do_POST(self):
            with open(count_file, "a") as f:
                f.write(self.path + "\\n")
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for _ in range(16):
                chunk = {"choices": [{"index": 0, "text": "x", "delta": {"content": "x"}}]}
                self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\\n\\n")
            usage = {"choices": [], "usage": {"prompt_tokens": 128, "completion_tokens": 16}}
            self.wfile.write(b"data: " + json.dumps(usage).encode() + b"\\n\\n")
            self.wfile.write(b"data: [DONE]\\n\\n")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()
    """
)


@dataclass
class ForeignServer:
    port: int
    proc: subprocess.Popen
    count_file: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def posts(self) -> int:
        return len(self.count_file.read_text().splitlines()) if self.count_file.exists() else 0

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)


@contextmanager
def foreign_server(tmp_path: Path, model: str = "qwen32b") -> Iterator[ForeignServer]:
    """A foreign server in its own process, answering on 127.0.0.1 before this returns."""
    count_file = tmp_path / f"foreign-posts-{time.monotonic_ns()}.txt"
    proc = subprocess.Popen(
        [sys.executable, "-c", _SCRIPT, model, str(count_file), FOREIGN_VERSION],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    server = ForeignServer(0, proc, count_file)
    try:
        port = int(proc.stdout.readline())
        assert httpx.get(f"http://127.0.0.1:{port}/health", trust_env=False).status_code == 200
        server = ForeignServer(port, proc, count_file)
        yield server
    finally:
        server.stop()

"""An OpenAI-compatible SSE server that streams instantly, to measure clients, not engines.

Plain asyncio (no web framework) so that one core serves far more chunks/s than a client
can read: every response is written at once, one HTTP chunk per SSE event, shaped like
vLLM's (token chunks, a usage-only last chunk, `[DONE]`). `max_tokens` (or
`max_completion_tokens`) sets the number of token chunks.

With `--interval-ms X` it paces the token chunks X ms apart instead, like an engine
decoding at a TPOT of X ms, to measure timestamp error at a realistic load.

It records, per request, the perf_counter (CLOCK_MONOTONIC, shared by processes on Linux)
at which the first and the last token chunk were written, keyed by prompt; `GET /timings`
returns and clears them, so a benchmark can compute the client's timestamp error.

    python benchmarks/instant_server.py --port 8765 [--model instant] [--interval-ms 0]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time

DEFAULT_TOKENS = 16


def _sse_chunk(payload: bytes) -> bytes:
    event = b"data: " + payload + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(event), event)


class InstantServer(asyncio.Protocol):
    """One connection: HTTP/1.1 with keep-alive, requests handled in arrival order."""

    def __init__(self, model: str, timings: list, interval_s: float = 0.0) -> None:
        self.model = model
        self.interval_s = interval_s
        self.timings = timings
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            head_end = self.buf.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buf[:head_end].decode("latin-1").split("\r\n")
            method, path, _ = head[0].split(" ", 2)
            length = 0
            for line in head[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            if len(self.buf) < head_end + 4 + length:
                return
            body = self.buf[head_end + 4 : head_end + 4 + length]
            self.buf = self.buf[head_end + 4 + length :]
            self.respond(method, path, body)

    def _reply(self, status: str, payload: bytes, content_type: str = "application/json") -> None:
        assert self.transport is not None
        self.transport.write(
            b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s"
            % (status.encode(), content_type.encode(), len(payload), payload)
        )

    def respond(self, method: str, path: str, body: bytes) -> None:
        if method == "GET" and path == "/v1/models":
            data = {"object": "list", "data": [{"id": self.model, "object": "model"}]}
            self._reply("200 OK", json.dumps(data).encode())
        elif method == "GET" and path == "/health":
            self._reply("200 OK", b"")
        elif method == "GET" and path == "/timings":
            self._reply("200 OK", json.dumps(self.timings).encode())
            self.timings.clear()
        elif method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
            self.stream(json.loads(body), chat=path.endswith("chat/completions"))
        else:
            self._reply("404 Not Found", b'{"error": "not found"}')

    def stream(self, req: dict, chat: bool) -> None:
        assert self.transport is not None
        n = int(req.get("max_tokens") or req.get("max_completion_tokens") or DEFAULT_TOKENS)
        choice = {"index": 0, "finish_reason": None}
        if chat:
            choice["delta"] = {"content": " tok"}
        else:
            choice["text"] = " tok"
        kind = "chat.completion.chunk" if chat else "text_completion"
        token = {"id": "c", "object": kind, "model": self.model, "choices": [choice]}
        token_chunk = _sse_chunk(json.dumps(token).encode())
        usage = {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": n}}
        tail = _sse_chunk(json.dumps(usage).encode()) + _sse_chunk(b"[DONE]") + b"0\r\n\r\n"
        head = (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        prompt = str(req.get("prompt") or req.get("messages", [{}])[0].get("content", ""))
        if self.interval_s <= 0:  # instant: the whole response in one write
            sent = time.perf_counter()
            self.transport.write(head + token_chunk * n + tail)
            self.timings.append((prompt, sent, sent))
            return
        first = time.perf_counter()
        self.transport.write(head + token_chunk)
        loop = asyncio.get_running_loop()

        def next_token(left: int) -> None:
            if self.transport is None or self.transport.is_closing():
                return
            if left == 0:
                self.transport.write(tail)
                return
            last = time.perf_counter()
            self.transport.write(token_chunk)
            if left == 1:
                self.timings.append((prompt, first, last))
            loop.call_later(self.interval_s, next_token, left - 1)

        if n == 1:
            self.timings.append((prompt, first, first))
        loop.call_later(self.interval_s, next_token, n - 1)


async def serve(host: str, port: int, model: str, interval_s: float = 0.0) -> None:
    timings: list = []
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: InstantServer(model, timings, interval_s), host, port, backlog=4096
    )
    print(f"instant server on http://{host}:{port}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--model", default="instant")
    parser.add_argument(
        "--interval-ms", type=float, default=0.0, help="gap between token chunks (0: instant)"
    )
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.host, args.port, args.model, args.interval_ms / 1000))


if __name__ == "__main__":
    main()

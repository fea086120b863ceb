"""Server-Sent Events parsing for OpenAI-style streams (pure: bytes in, events out).

Split in two steps so both are unit-testable without a network:
`SseDecoder` cuts a byte stream into `data:` payloads (skipping `: ping` comments and
other fields), and `interpret` reads one payload as a completions or chat chunk.
"""

from __future__ import annotations

import json
from typing import Literal, NamedTuple

DONE = "[DONE]"


class SseDecoder:
    """Incremental SSE decoder: feed raw bytes, get the data payload of each complete event.

    Events end at a blank line (`\\n\\n`, `\\r\\n\\r\\n` or `\\r\\r`). Lines starting with `:`
    are comments (keep-alive pings) and fields other than `data` are ignored; several
    `data:` lines of one event are joined with `\\n`, as the SSE specification says.
    """

    __slots__ = ("_buf", "_cr")

    def __init__(self) -> None:
        self._buf = b""
        self._cr = False

    def feed(self, chunk: bytes) -> list[str]:
        """Add bytes; return the payloads of the events completed by them, in order."""
        if b"\r" in chunk or self._cr:
            # Rare: normalise CRLF/CR line ends. A CR at a chunk's end may start a CRLF.
            chunk = (b"\r" if self._cr else b"") + chunk
            self._cr = chunk.endswith(b"\r")
            if self._cr:
                chunk = chunk[:-1]
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buf = self._buf + chunk
        if b"\n\n" not in buf:
            self._buf = buf
            return []
        *events, self._buf = buf.split(b"\n\n")
        out = []
        for raw in events:
            if raw[:6] == b"data: " and b"\n" not in raw:  # the common case: one data line
                out.append(raw[6:].decode("utf-8", "replace"))
            else:
                payload = _event_data(raw)
                if payload is not None:
                    out.append(payload)
        return out

    def flush(self) -> list[str]:
        """End of stream: a last event not followed by a blank line still counts."""
        raw, self._buf = self._buf, b""
        payload = _event_data(raw.strip(b"\n")) if raw.strip() else None
        return [payload] if payload is not None else []


def _event_data(raw: bytes) -> str | None:
    """The data payload of one event, or None when it has no data (comment-only, empty)."""
    data: list[bytes] = []
    for line in raw.split(b"\n"):
        if line.startswith(b"data"):
            field, _, value = line.partition(b":")
            if field != b"data":
                continue
            data.append(value[1:] if value.startswith(b" ") else value)
    if not data:
        return None
    return b"\n".join(data).decode("utf-8", "replace")


class StreamEvent(NamedTuple):
    """What one payload means for the measurement (a tuple: cheap at 100k chunks/s).

    kind: `token` (non-empty `choices`: the timestamps of TTFT, ITL and E2EL), `usage`
    (no choices), `done` (`[DONE]`), `error` (the server reported an error in-stream),
    or `other` (a chunk with neither choices nor usage).
    """

    kind: Literal["token", "usage", "done", "error", "other"]
    text: str = ""
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    error: str = ""


_DONE_EVENT = StreamEvent("done")


def interpret(payload: str, chat: bool) -> StreamEvent:
    """Read one payload of /v1/completions (`chat=False`) or /v1/chat/completions.

    Usage is read from any chunk that carries it (vLLM sends it in a last chunk with
    empty `choices`). A non-JSON payload raises ValueError: the stream is broken.
    """
    if payload == DONE:
        return _DONE_EVENT
    data = json.loads(payload)
    if type(data) is not dict:
        raise ValueError(f"SSE payload is not a JSON object: {payload[:80]!r}")
    usage = data.get("usage")
    completion_tokens = prompt_tokens = None
    if type(usage) is dict:
        completion_tokens = usage.get("completion_tokens")
        prompt_tokens = usage.get("prompt_tokens")
    choices = data.get("choices")
    if choices:
        if chat:
            delta = choices[0].get("delta")
            text = (delta.get("content") if delta else None) or ""
        else:
            text = choices[0].get("text") or ""
        return StreamEvent("token", text, completion_tokens, prompt_tokens)
    if "error" in data:
        err = data["error"]
        message = err.get("message", err) if isinstance(err, dict) else err
        return StreamEvent("error", error=str(message))
    if completion_tokens is not None or prompt_tokens is not None:
        return StreamEvent("usage", "", completion_tokens, prompt_tokens)
    return StreamEvent("other")

"""Server-Sent Events parsing for OpenAI-style streams (pure: bytes in, events out).

Split in two steps so both are unit-testable without a network:
`SseDecoder` cuts a byte stream into `data:` payloads (skipping `: ping` comments and
other fields), and `interpret` reads one payload as a completions or chat chunk.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Literal, NamedTuple

DONE = "[DONE]"


MAX_EVENT_BYTES = 64 * 2**20  # one SSE event; vLLM's are well under a kilobyte


class SseDecoder:
    """Incremental SSE decoder: feed raw bytes, get the data payload of each complete event.

    Events end at a blank line (`\\n\\n`, `\\r\\n\\r\\n` or `\\r\\r`). Lines starting with `:`
    are comments (keep-alive pings) and fields other than `data` are ignored; several
    `data:` lines of one event are joined with `\\n`, as the SSE specification says.
    Linear time however the bytes are cut: an unfinished event waits as a list of pieces,
    each searched once, and is joined once when its end arrives. An event over
    MAX_EVENT_BYTES raises ValueError (the stream is broken, not a benchmark).
    """

    __slots__ = ("_cr", "_parts", "_size")

    def __init__(self) -> None:
        self._parts: list[bytes] = []  # the unfinished event, as it arrived
        self._size = 0
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
        if not chunk:
            return []
        parts = self._parts
        if parts:
            # The blank line may straddle the pieces: "...\n" then "\n...".
            ends = b"\n\n" in chunk or (chunk[:1] == b"\n" and parts[-1][-1:] == b"\n")
            parts.append(chunk)
            self._size += len(chunk)
            if not ends:
                if self._size > MAX_EVENT_BYTES:
                    raise ValueError(f"an SSE event is over {MAX_EVENT_BYTES} bytes")
                return []
            buf = b"".join(parts)
            self._parts, self._size = [], 0
        elif b"\n\n" not in chunk:
            if len(chunk) > MAX_EVENT_BYTES:
                raise ValueError(f"an SSE event is over {MAX_EVENT_BYTES} bytes")
            self._parts, self._size = [chunk], len(chunk)
            return []
        else:
            buf = chunk
        *events, tail = buf.split(b"\n\n")
        if tail:
            self._parts, self._size = [tail], len(tail)
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
        raw = b"".join(self._parts)
        self._parts, self._size = [], 0
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
    empty `choices`). A payload that is not such a chunk (not JSON, `choices` not a list of
    objects, text not a string, token counts not integers in 0..MAX_TOKENS) raises
    ValueError: the stream is broken, and the request fails with that message.
    """
    if payload == DONE:
        return _DONE_EVENT
    try:
        data = json.loads(payload)
    except RecursionError:  # `[[[[...` nested past Python's stack
        raise ValueError("SSE payload is nested too deeply") from None
    if type(data) is not dict:
        raise ValueError(f"SSE payload is not a JSON object: {payload[:80]!r}")
    usage = data.get("usage")
    completion_tokens = prompt_tokens = None
    if type(usage) is dict:
        completion_tokens = _count(usage, "completion_tokens")
        prompt_tokens = _count(usage, "prompt_tokens")
    choices = data.get("choices")
    if choices:
        if type(choices) is not list or type(choices[0]) is not dict:
            raise ValueError(
                f"malformed SSE chunk: choices is not a list of objects: {payload[:80]!r}"
            )
        if chat:
            delta = choices[0].get("delta")
            if delta is not None and type(delta) is not dict:
                raise ValueError(f"malformed SSE chunk: delta is not an object: {payload[:80]!r}")
            text = (delta.get("content") if delta else None) or ""
        else:
            text = choices[0].get("text") or ""
        if type(text) is not str:
            raise ValueError(f"malformed SSE chunk: the text is not a string: {payload[:80]!r}")
        return StreamEvent("token", text, completion_tokens, prompt_tokens)
    if "error" in data:
        err = data["error"]
        message = err.get("message", err) if isinstance(err, dict) else err
        return StreamEvent("error", error=str(message)[:500])
    if completion_tokens is not None or prompt_tokens is not None:
        return StreamEvent("usage", "", completion_tokens, prompt_tokens)
    return StreamEvent("other")


MAX_TOKENS = 2**31 - 1  # a token count past this is garbage, not a measurement


def _count(usage: Mapping[str, object], key: str) -> int | None:
    value = usage.get(key)
    if value is None:
        return None
    if type(value) is not int or not 0 <= value <= MAX_TOKENS:
        shown = "out of range" if type(value) is int else repr(value)[:40]
        raise ValueError(f"malformed SSE chunk: usage.{key} is {shown}, not a count")
    return value

"""The OpenAI response objects of `tuner sim serve`, shaped as vLLM writes them: completion
and chat chunks, the usage block, one SSE event. Plain dicts and bytes, no HTTP."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping

JsonObject = dict[str, object]  # one JSON object as `json.dumps` takes it


class Chunks:
    """OpenAI response objects, shaped as vLLM writes them."""

    def __init__(self, rid: str, model: str, chat: bool) -> None:
        self.chat = chat
        self.head: JsonObject = {
            "id": rid,
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": int(time.time()),
            "model": model,
        }

    def role(self) -> JsonObject:
        delta = {"role": "assistant", "content": ""}
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
        return {**self.head, "choices": [choice]}

    def token(self, text: str, last: bool) -> JsonObject:
        reason = "length" if last else None
        if self.chat:
            choice = {"index": 0, "delta": {"content": text}, "logprobs": None}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "stop_reason": None}
        return {**self.head, "choices": [{**choice, "finish_reason": reason}]}

    def usage(self, usage: Mapping[str, int]) -> JsonObject:
        return {**self.head, "choices": [], "usage": usage}

    def full(self, text: str, usage: Mapping[str, int]) -> JsonObject:
        if self.chat:
            message = {"role": "assistant", "content": text}
            choice = {"index": 0, "message": message, "finish_reason": "length"}
            head = {**self.head, "object": "chat.completion"}
        else:
            choice = {"index": 0, "text": text, "finish_reason": "length", "stop_reason": None}
            head = self.head
        return {**head, "choices": [{**choice, "logprobs": None}], "usage": usage}


def usage_of(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }


def sse(obj: Mapping[str, object]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"

"""SSE decoding and chunk interpretation, on byte streams shaped like vLLM's."""

from __future__ import annotations

import json

import pytest

from tuner.workload.sse import SseDecoder, interpret


def _completion(text: str) -> str:
    return json.dumps(
        {"id": "c", "object": "text_completion", "choices": [{"index": 0, "text": text}]}
    )


def _chat(content: str | None, role: str | None = None) -> str:
    delta: dict = {}
    if role:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    return json.dumps({"choices": [{"index": 0, "delta": delta}]})


USAGE = json.dumps({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}})


def _events(*payloads: str) -> bytes:
    return b"".join(f"data: {p}\n\n".encode() for p in payloads)


def test_whole_stream_in_one_chunk():
    stream = _events(_completion("a"), _completion("b"), USAGE, "[DONE]")
    assert SseDecoder().feed(stream) == [_completion("a"), _completion("b"), USAGE, "[DONE]"]


def test_byte_by_byte_gives_same_events():
    stream = _events(_completion("héllo"), USAGE, "[DONE]")
    dec = SseDecoder()
    out = []
    for i in range(len(stream)):
        out += dec.feed(stream[i : i + 1])
    assert out == [_completion("héllo"), USAGE, "[DONE]"]


def test_comment_pings_are_skipped():
    stream = b": ping\n\n" + _events(_completion("x")) + b": keep-alive\n\n"
    assert SseDecoder().feed(stream) == [_completion("x")]


def test_crlf_line_ends_split_across_chunks():
    stream = _events(_completion("a"), "[DONE]").replace(b"\n", b"\r\n")
    dec = SseDecoder()
    cut = stream.index(b"\r\n") + 1  # between \r and \n
    assert dec.feed(stream[:cut]) + dec.feed(stream[cut:]) == [_completion("a"), "[DONE]"]


def test_multiline_data_and_other_fields():
    stream = b'event: message\nid: 4\ndata: {"a":\ndata: 1}\nretry: 10\n\n'
    assert SseDecoder().feed(stream) == ['{"a":\n1}']


def test_data_without_space_and_partial_tail():
    dec = SseDecoder()
    assert dec.feed(b'data:[DONE]\n\ndata: {"x"') == ["[DONE]"]
    assert dec.feed(b": 1}") == []
    assert dec.flush() == ['{"x": 1}']
    assert dec.flush() == []


def test_interpret_completion_token_and_usage():
    ev = interpret(_completion("hi"), chat=False)
    assert (ev.kind, ev.text, ev.completion_tokens) == ("token", "hi", None)
    usage = interpret(USAGE, chat=False)
    assert (usage.kind, usage.completion_tokens, usage.prompt_tokens) == ("usage", 3, 7)
    assert interpret("[DONE]", chat=False).kind == "done"


def test_interpret_empty_text_still_a_token():
    # Special tokens can stream as empty text: vLLM still counts the message's timestamp.
    assert interpret(_completion(""), chat=False).kind == "token"


def test_interpret_chat_empty_first_delta_is_a_token():
    first = interpret(_chat(None, role="assistant"), chat=True)
    assert (first.kind, first.text) == ("token", "")
    assert interpret(_chat("yes"), chat=True).text == "yes"


def test_interpret_usage_only_final_chunk_has_no_choices():
    ev = interpret(
        json.dumps({"id": "x", "choices": [], "usage": {"completion_tokens": 128}}), True
    )
    assert ev.kind == "usage" and ev.completion_tokens == 128


def test_interpret_usage_on_token_chunk_is_kept():
    payload = json.dumps({"choices": [{"text": "z"}], "usage": {"completion_tokens": 5}})
    ev = interpret(payload, chat=False)
    assert ev.kind == "token" and ev.completion_tokens == 5


def test_interpret_in_stream_error():
    ev = interpret(json.dumps({"error": {"message": "boom", "code": 500}}), chat=False)
    assert ev.kind == "error" and ev.error == "boom"


def test_interpret_other_and_broken():
    assert interpret(json.dumps({"id": "x"}), chat=False).kind == "other"
    with pytest.raises(ValueError):
        interpret("{not json", chat=False)
    with pytest.raises(ValueError):
        interpret("[1, 2]", chat=False)

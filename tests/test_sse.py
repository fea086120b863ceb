"""SSE decoding and chunk interpretation, on byte streams shaped like vLLM's."""

from __future__ import annotations

import json
import time

import pytest

from tuner.workload import sse
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


def _decode_time(size: int, piece: int = 1000) -> float:
    """CPU seconds to decode one `size`-byte data line delivered in `piece`-byte chunks (best
    of 5; CPU time, so another process taking the core does not read as our time)."""
    stream = b"data: " + b"x" * size + b"\n\n"
    best = float("inf")
    for _ in range(5):
        dec, out = SseDecoder(), []
        t = time.process_time()
        for i in range(0, len(stream), piece):
            out += dec.feed(stream[i : i + piece])
        best = min(best, time.process_time() - t)
        assert len(out) == 1 and len(out[0]) == size
    return best


def test_long_sse_line_in_small_pieces_decodes_in_linear_time():
    # The old decoder copied the whole pending line at every piece: 1 MB took 0.5 s and
    # 4 MB 8.8 s (x17). Linear: about x4; x8 leaves room for noise, not for x16.
    small, large = _decode_time(2**20), _decode_time(2**22)
    assert large < 8 * small + 0.05, (small, large)
    assert _decode_time(5 * 2**20) < 1.0  # about 0.03 s here


def test_blank_line_split_across_pieces_still_ends_the_event():
    dec = SseDecoder()
    assert dec.feed(b"data: a") == [] and dec.feed(b"b\n") == []
    assert dec.feed(b"\ndata: c\n") == ["ab"]
    assert dec.feed(b"\n") == ["c"]


def test_oversized_sse_event_is_a_broken_stream(monkeypatch):
    monkeypatch.setattr(sse, "MAX_EVENT_BYTES", 1000)
    dec = SseDecoder()
    dec.feed(b"data: " + b"x" * 600)
    with pytest.raises(ValueError, match="over 1000 bytes"):
        dec.feed(b"x" * 600)


@pytest.mark.parametrize(
    "payload",
    [
        {"choices": [1]},
        {"choices": "x"},
        {"choices": [{"text": ["a"]}]},
        {"choices": [{"text": "a"}], "usage": {"completion_tokens": 1e30}},
        {"choices": [{"text": "a"}], "usage": {"completion_tokens": "12"}},
        {"choices": [{"text": "a"}], "usage": {"completion_tokens": -1}},
        {"choices": [{"text": "a"}], "usage": {"completion_tokens": 2**40}},
        {"choices": [], "usage": {"prompt_tokens": 1.5}},
    ],
)
def test_malformed_sse_chunk_raises_value_error(payload):
    with pytest.raises(ValueError, match="malformed SSE chunk"):
        interpret(json.dumps(payload), chat=False)


def test_malformed_chat_delta_raises_value_error():
    with pytest.raises(ValueError, match="delta is not an object"):
        interpret(json.dumps({"choices": [{"delta": "x"}]}), chat=True)


def test_deeply_nested_sse_payload_raises_value_error():
    with pytest.raises(ValueError, match="nested too deeply"):
        interpret('{"choices": ' + "[" * 100_000 + "]" * 100_000 + "}", chat=False)

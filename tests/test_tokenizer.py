"""The simulated server's fast tokenizer (`load_counter`) counts and decodes exactly as
transformers' (`load_tokenizer`, what `vllm bench serve` uses) on the tiny Qwen2 model."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tuner.errors import UserError
from tuner.sim.text import TokenText
from tuner.workload.tokenizer import TokenCounter, load_counter, load_tokenizer

_PIECES = [
    "hello", " world", "The", " queue", "'s", "don't", "ç", "e\u0301", "é", "日本語", "42",
    "2048.5", "  x", "\n\n", "\r\n", "\t", "<|im_start|>", "<|im_end|>", "tok-12", "!?", "ß",
]  # fmt: skip


@pytest.fixture(scope="module")
def both(tiny_model_dir: Path):
    return load_tokenizer(str(tiny_model_dir)), load_counter(str(tiny_model_dir))


def test_counter_is_the_fast_path(both) -> None:
    assert isinstance(both[1], TokenCounter)


def test_same_ids_with_and_without_special_tokens(both) -> None:
    full, fast = both
    rng = random.Random(7)
    for _ in range(400):
        text = "".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 30)))
        for special in (True, False):
            want = full(text, add_special_tokens=special)["input_ids"]
            assert fast(text, add_special_tokens=special)["input_ids"] == want, repr(text)
            assert fast.encode(text, add_special_tokens=special) == want, repr(text)


def test_same_decoding_vocabulary_and_chat_count(both) -> None:
    full, fast = both
    assert (fast.vocab_size, len(fast)) == (full.vocab_size, len(full))
    rng = random.Random(11)
    for _ in range(300):
        ids = [rng.randrange(len(full)) for _ in range(rng.randint(1, 24))]
        assert fast.decode(ids) == full.decode(ids), ids
    assert TokenText(fast).words == TokenText(full).words
    messages = [{"role": "user", "content": "Which block size? Answer in one word."}]
    assert fast.chat_template == full.chat_template
    assert TokenText(fast).count_chat(messages) == TokenText(full).count_chat(messages)


def test_a_directory_without_tokenizer_json_uses_transformers(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="tokenizer directory not found"):
        load_counter(str(tmp_path / "nope"))
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(UserError, match="cannot load a tokenizer"):
        load_counter(str(tmp_path))


def test_chat_templates_render_without_transformers(both) -> None:
    """The counter renders the chat template itself (jinja2, as transformers does), so a chat
    request does not make the simulated server import transformers."""
    full, fast = both
    for messages in (
        [{"role": "user", "content": "hi"}],
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Why?\n"}],
        [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
         {"role": "user", "content": "c  d"}],
    ):  # fmt: skip
        for gen in (True, False):
            want = full.apply_chat_template(messages, add_generation_prompt=gen, tokenize=False)
            assert (
                fast.apply_chat_template(messages, add_generation_prompt=gen, tokenize=False)
                == want
            )
            ids = full.apply_chat_template(messages, add_generation_prompt=gen, tokenize=True)
            ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
            assert fast.apply_chat_template(messages, add_generation_prompt=gen) == ids
    assert "_full" not in vars(fast)  # transformers' tokenizer never loaded

"""Prompt token counts and output text of the simulated server."""

from __future__ import annotations

import pytest

from tuner.sim.text import TokenText
from tuner.workload.tokenizer import load_tokenizer


@pytest.fixture(scope="module")
def text(tiny_model_dir) -> TokenText:
    return TokenText(load_tokenizer(str(tiny_model_dir)))


def test_prompts_are_counted_with_the_tokenizer(text):
    ids = text.tokenizer("the model and the cache", add_special_tokens=True)["input_ids"]
    assert text.count_prompt("the model and the cache") == len(ids)
    assert text.count_prompt([5, 6, 7]) == 3
    assert text.count_prompt(["one prompt in a list"]) == text.count_prompt("one prompt in a list")
    with pytest.raises(ValueError, match="one prompt per request"):
        text.count_prompt(["a", "b"])


def test_chat_counts_the_template_too(text):
    messages = [{"role": "user", "content": "the model and the cache"}]
    assert text.count_chat(messages) > text.count_prompt("the model and the cache")


def test_output_tokens_are_real_vocabulary_words(text):
    words = [text.token(i) for i in range(10)]
    assert all(w.startswith(" ") and w[1:].isalpha() for w in words)
    for w in words:
        assert text.tokenizer.decode(text.tokenizer.encode(w, add_special_tokens=False)) == w


def test_without_a_tokenizer_words_are_counted():
    plain = TokenText()
    assert plain.count_prompt("a b  c") == 3
    assert plain.count_chat([{"role": "user", "content": "a b"}]) == 2 + 5 + 3
    assert plain.token(0).strip()

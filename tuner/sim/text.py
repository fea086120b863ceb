"""Prompt token counts and output text for the simulated server, from a real tokenizer.

The simulator computes no logits; it emits real vocabulary tokens (ordinary words of the
tokenizer, in a fixed cycle) so that clients that detokenize or re-tokenize see text.
Without a tokenizer (a built-in model name), prompts are counted as whitespace words.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

_FALLBACK_WORDS = [" the", " model", " token", " step", " cache", " batch", " queue", " time"]
# Qwen-style chat markup per message ("<|im_start|>role\n ... <|im_end|>\n") and the
# generation prompt, counted when the tokenizer cannot render its chat template.
_CHAT_TOKENS_PER_MESSAGE = 5
_CHAT_GENERATION_PROMPT_TOKENS = 3


class TokenText:
    """Counts prompt tokens and yields the text of generated tokens."""

    def __init__(self, tokenizer: Any | None = None) -> None:
        self.tokenizer = tokenizer
        self.words = _word_tokens(tokenizer) if tokenizer is not None else _FALLBACK_WORDS

    def count_prompt(self, prompt: object) -> int:
        """Tokens of a completions prompt: a string or a list of token ids."""
        return self.prompt_tokens(prompt)[0]

    def prompt_tokens(self, prompt: object) -> tuple[int, list[int] | None]:
        """(token count, token ids) of a completions prompt; the ids are None without a
        tokenizer (whitespace words are counted instead)."""
        if isinstance(prompt, list):
            if all(isinstance(t, int) for t in prompt):
                return len(prompt), list(prompt)
            if len(prompt) == 1:
                return self.prompt_tokens(prompt[0])
            raise ValueError("only one prompt per request is supported")
        if not isinstance(prompt, str):
            raise ValueError("prompt must be a string or a list of token ids")
        if self.tokenizer is None:
            return len(prompt.split()), None
        ids = list(self.tokenizer(prompt, add_special_tokens=True)["input_ids"])
        return len(ids), ids

    def count_chat(self, messages: Sequence[object]) -> int:
        """Tokens of chat messages after the chat template (or a Qwen-style estimate)."""
        return self.chat_tokens(messages)[0]

    def chat_tokens(self, messages: Sequence[object]) -> tuple[int, list[int] | None]:
        """(token count, token ids) of chat messages after the chat template; without one,
        a Qwen-style estimate of the count and no ids."""
        if self.tokenizer is not None and getattr(self.tokenizer, "chat_template", None):
            try:
                ids = self.tokenizer.apply_chat_template(
                    messages, add_generation_prompt=True, tokenize=True
                )
                ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
                return len(ids), ids
            except ImportError:  # jinja2 missing: fall back to the estimate below
                pass
        total = _CHAT_GENERATION_PROMPT_TOKENS
        for message in messages:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, list):  # OpenAI content parts
                content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            total += _CHAT_TOKENS_PER_MESSAGE + self.count_prompt(str(content or ""))
        return total, None

    def token(self, index: int) -> str:
        """Text of the index-th generated token of a request."""
        return self.words[index % len(self.words)]


def _word_tokens(tokenizer: Any, limit: int = 64) -> list[str]:
    """Ordinary word tokens (a space then letters) from the vocabulary, in id order."""
    words: list[str] = []
    size = getattr(tokenizer, "vocab_size", 0) or len(tokenizer)
    for token_id in range(size):
        text = tokenizer.decode([token_id])
        if len(text) > 2 and text[0] == " " and text[1:].isalpha():
            words.append(text)
            if len(words) == limit:
                break
    return words or _FALLBACK_WORDS

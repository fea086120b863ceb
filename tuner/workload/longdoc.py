"""The built-in long-document dataset: synthetic documents with a question, nothing downloaded.

Each prompt is an instruction and a question, then a document of plain English words that
states the answer once, somewhere in its first 80 %. Its length is drawn from a mix of
lengths (by default the seed's long-document QA case: 512, 2048, 8192 and 32768 prompt
tokens, 1024 output tokens) and is exact with the study's tokenizer, as for random prompts
(`tuner.workload.exact`). The document is built from token ids (the words' ids, encoded
once), so a 32k-token prompt costs one decode and one encode. Same seed, same prompts.

Documents asked several times (`shared_longdoc_prompts`, docs/datasets.md): the document comes
first and its question last, so every question on one document shares the document as a
prefix that vLLM's prefix cache can reuse, after an optional system prompt that every request
shares. Such a document holds one fact per question.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tuner.errors import UserError
from tuner.workload.exact import exact_length_prompt
from tuner.workload.tokenizer import HFTokenizer, decode

_MIN_WORDS = 8  # of document text around the answer, at the least
_FACT_SPAN = 0.8  # the answer sits in this leading share of the document
_FIRST_KEY, _KEYS = 100, 900  # record numbers 100-999; a document asked more times gets more
_WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at "
    "which but have an they you were her she there been one all we their has would when "
    "if so no more can said who about time will into its some could them other than then "
    "only new two first also any these may after most made over years state system report "
    "market water number part people world house power river city court party group "
    "during between under record value table figure section process method result data "
    "north south early later large small common public local general"
).split()
_PUNCTUATION = (".", ",")  # one word in eight is followed by one of these


def longdoc_prompts(
    tokenizer: HFTokenizer,
    num_prompts: int,
    *,
    lengths: Sequence[int],
    weights: Sequence[float] | None,
    seed: int,
) -> list[tuple[str, list[int]]]:
    """`num_prompts` documents (text and token ids), their lengths drawn from `lengths` (by
    `weights`, default equal), less the special tokens the server adds, as random prompts."""
    num_special = int(tokenizer.num_special_tokens_to_add())
    words = _Words(tokenizer)
    # The longest instruction, question and answer (largest key, code and document number).
    shortest = len(words.encode(_head(999, num_prompts) + _fact(999, 99_999)))
    shortest += _MIN_WORDS + num_special
    if min(lengths) < shortest:
        raise UserError(
            f"longdoc length {min(lengths)} is too short for a document and its question "
            f"with this tokenizer (at least {shortest} tokens)"
        )
    rng = np.random.default_rng(seed)
    p = None if weights is None else np.asarray(weights, float) / float(sum(weights))
    picks = rng.choice(len(lengths), size=num_prompts, p=p)
    return [
        _document(tokenizer, words, rng, k, int(lengths[int(picks[k])]) - num_special)
        for k in range(num_prompts)
    ]


class _Words:
    """The token ids of each word (with its leading space) and of each punctuation mark."""

    def __init__(self, tokenizer: HFTokenizer) -> None:
        def encode(text: str) -> list[int]:
            ids: list[int] = tokenizer.encode(text, add_special_tokens=False)
            return ids

        self.encode = encode
        self.words = [encode(" " + w) for w in _WORDS]
        self.marks = [encode(m) for m in _PUNCTUATION]

    def draw(self, rng: np.random.Generator, n_tokens: int) -> list[list[int]]:
        """At least `n_tokens` tokens of text, as a list of words' ids."""
        picks = rng.integers(0, len(self.words), size=n_tokens)
        marks = rng.integers(0, 8 * len(self.marks), size=n_tokens)
        out: list[list[int]] = []
        for w, m in zip(picks.tolist(), marks.tolist(), strict=True):
            out.append(self.words[w])
            if m < len(self.marks):
                out.append(self.marks[m])
        return out


def _head(key: int, number: int) -> str:
    return (
        "Answer the question using only the document below.\n"
        f"Question: what is the code of record {key}?\n\nDocument {number}:\n"
    )


def _fact(key: int, code: int) -> str:
    return f". The code of record {key} is {code}."


def shared_longdoc_prompts(
    tokenizer: HFTokenizer,
    num_prompts: int,
    *,
    lengths: Sequence[int],
    weights: Sequence[float] | None,
    questions: Sequence[int],
    system_len: int,
    order: str,
    seed: int,
) -> list[tuple[str, list[int]]]:
    """`num_prompts` prompts (text and token ids): system prompt, instruction, document, then
    one of its questions. Each document's length is drawn from `lengths` (by `weights`) and
    its number of questions uniformly from `questions`; a prompt is its document's length,
    less up to a few tokens when its question encodes shorter than the longest one. `order`
    "burst": a document's questions one after another; "spread": all prompts shuffled."""
    num_special = int(tokenizer.num_special_tokens_to_add())
    words = _Words(tokenizer)
    rng = np.random.default_rng(seed)
    system = _system_ids(words, system_len)
    last = _keys_end(max(questions)) - 1  # the largest record number a question may name
    tail = max(len(words.encode(_question(k))) for k in (100, 555, 999, last))
    head = len(words.encode(_shared_head(99_999)))
    shortest = len(system) + head + tail + len(words.encode(_fact(last, 99_999))) + _MIN_WORDS
    if min(lengths) - num_special < shortest:
        raise UserError(
            f"longdoc length {min(lengths)} is too short for a system prompt of {system_len} "
            f"tokens, a document and its question with this tokenizer (at least "
            f"{shortest + num_special} tokens)"
        )
    p = None if weights is None else np.asarray(weights, float) / float(sum(weights))
    docs: list[list[tuple[str, list[int]]]] = []
    total = 0
    while total < num_prompts:
        target = int(lengths[int(rng.choice(len(lengths), p=p))]) - num_special
        asked = int(questions[int(rng.integers(0, len(questions)))])
        docs.append(_asked_document(tokenizer, words, rng, system, len(docs), target, asked))
        total += asked
    prompts = [prompt for doc in docs for prompt in doc][:num_prompts]
    if order == "spread":
        prompts = [prompts[i] for i in rng.permutation(len(prompts))]
    return prompts


def _system_ids(words: _Words, n_tokens: int) -> list[int]:
    """`n_tokens` of fixed text that every prompt starts with (the same for every seed)."""
    if n_tokens <= 0:
        return []
    text = words.encode("You answer questions about documents, briefly and exactly.\n")
    filler = [t for word in words.draw(np.random.default_rng(0), n_tokens) for t in word]
    return (text + filler)[:n_tokens]


def _keys_end(asked: int) -> int:
    """One past the record numbers a document asked `asked` times draws from: 100-999 (as
    ever) up to 900 questions, one more number per question above that (each question names
    its own record)."""
    return _FIRST_KEY + max(_KEYS, asked)


def _shared_head(number: int) -> str:
    return f"Answer the question at the end using only this document.\n\nDocument {number}:\n"


def _question(key: int) -> str:
    return f"\n\nQuestion: what is the code of record {key}?\nAnswer:"


def _asked_document(
    tokenizer: HFTokenizer,
    words: _Words,
    rng: np.random.Generator,
    system: list[int],
    k: int,
    target: int,
    asked: int,
) -> list[tuple[str, list[int]]]:
    """The `asked` prompts of document k: one shared prefix, one question each."""
    keys = [int(x) for x in rng.choice(np.arange(_FIRST_KEY, _keys_end(asked)), asked, False)]
    facts = [words.encode(_fact(key, int(rng.integers(10_000, 100_000)))) for key in keys]
    questions = [words.encode(_question(key)) for key in keys]
    prefix = system + words.encode(_shared_head(k + 1))
    room = target - len(prefix) - max(len(q) for q in questions) - sum(len(f) for f in facts)
    body = words.draw(rng, max(room, 1))
    ends = np.cumsum([len(word) for word in body])
    span = max(int(np.searchsorted(ends, room * _FACT_SPAN)), 1)
    places = rng.integers(0, span, size=asked).tolist()
    for at, fact in sorted(zip(places, facts, strict=True), reverse=True):
        body.insert(int(at), fact)
    document = (prefix + [t for word in body for t in word])[: target - max(map(len, questions))]
    prompts = []
    for question in questions:
        text = decode(tokenizer, document + question)
        prompts.append((text, tokenizer.encode(text, add_special_tokens=False)))
    return prompts


def _document(
    tokenizer: HFTokenizer, words: _Words, rng: np.random.Generator, k: int, target: int
) -> tuple[str, list[int]]:
    """Prompt k: instruction, question, document; exactly `target` tokens."""
    key, code = int(rng.integers(100, 1000)), int(rng.integers(10_000, 100_000))
    head = words.encode(_head(key, k + 1))
    fact = words.encode(_fact(key, code))
    room = target - len(head) - len(fact)
    body = words.draw(rng, max(room, 1))
    ends = np.cumsum([len(word) for word in body])  # tokens up to each word
    at = int(rng.integers(0, max(int(np.searchsorted(ends, room * _FACT_SPAN)), 1)))
    body.insert(at, fact)
    ids = head + [t for word in body for t in word][: target - len(head)]

    def more_ids(n: int) -> list[int]:
        return [t for word in words.draw(rng, n) for t in word][:n]

    return exact_length_prompt(tokenizer, ids, target, more_ids)

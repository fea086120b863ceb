"""Build the fixed list of requests of a workload: same seed and dataset, same requests.

The random and ShareGPT datasets follow `vllm bench serve`'s RandomDataset and
ShareGPTDataset (vllm/benchmarks/datasets), so a given seed gives the same prompts as vLLM
with the same tokenizer. The jsonl dataset is ours: one request per line, in file order.
The longdoc dataset is ours too: synthetic documents with a question (`tuner.workload.longdoc`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
from functools import partial
from pathlib import Path
from typing import TypeGuard

import numpy as np

from tuner.errors import UserError
from tuner.spec.workload import WorkloadSpec
from tuner.workload.exact import exact_length_prompt, resized_prompt
from tuner.workload.longdoc import longdoc_prompts, shared_longdoc_prompts
from tuner.workload.request import BenchRequest, ChatMessages
from tuner.workload.tokenizer import HFTokenizer, chat_text, decode

# vLLM's ShareGPT filter (`is_valid_sequence`): both sides >= 4 tokens, prompt <= 1024,
# prompt + output <= 2048. The output minimum is skipped when the output length is fixed.
SHAREGPT_MIN_LEN = 4
SHAREGPT_MAX_PROMPT_LEN = 1024
SHAREGPT_MAX_TOTAL_LEN = 2048
# A tokenizer this small is a stand-in (the tiny test model's has 1,024 tokens; no production
# LLM's has under 32k): its random prompts start where a production vocabulary's would,
# in a space of PRODUCTION_VOCAB starts (Qwen2's vocab_size, the reference model's), written
# as the prompt's first tokens (docs/datasets.md, "Stand-in tokenizers").
STANDIN_VOCAB_BELOW = 16_384
PRODUCTION_VOCAB = 151_936


def resized(request: BenchRequest, tokenizer: HFTokenizer, factor: float) -> BenchRequest:
    """The request with its prompt `factor` times as long in tokens (a chat's last message
    is the part resized), the rest unchanged: the robustness check's perturbed prompts."""
    prompt = request.prompt
    if isinstance(prompt, str):
        text, old, new = resized_prompt(tokenizer, prompt, factor)
        changed: str | ChatMessages = text
    else:
        last = dict(prompt[-1])
        content = last.get("content")
        if not isinstance(content, str):
            return request
        last["content"], old, new = resized_prompt(tokenizer, content, factor)
        changed = [*prompt[:-1], last]
    ids = None  # a resized prompt's tokens, where the original's were kept
    if request.prompt_ids is not None and isinstance(changed, str):
        ids = tuple(tokenizer.encode(changed, add_special_tokens=False))
    return dataclasses.replace(
        request, prompt=changed, prompt_len=request.prompt_len + new - old, prompt_ids=ids
    )


def _longdoc_requests(spec: WorkloadSpec, tokenizer: HFTokenizer) -> list[BenchRequest]:
    """The long documents; asked several times (`longdoc_shared`), each keeps its token ids
    for the simulator's prefix cache."""
    lengths, weights, seed = spec.longdoc_lengths, spec.longdoc_weights, spec.seed
    shared = spec.longdoc_shared
    if shared:
        docs = shared_longdoc_prompts(
            tokenizer,
            spec.num_prompts,
            lengths=lengths,
            weights=weights,
            questions=spec.longdoc_questions,
            system_len=spec.longdoc_system_len,
            order=spec.longdoc_order,
            seed=seed,
        )
    else:
        docs = longdoc_prompts(
            tokenizer, spec.num_prompts, lengths=lengths, weights=weights, seed=seed
        )
    return [
        BenchRequest(
            text,
            len(ids),
            spec.longdoc_output_len,
            ignore_eos=True,
            prompt_ids=tuple(ids) if shared else None,
        )
        for text, ids in docs
    ]


def build_requests(spec: WorkloadSpec, tokenizer: HFTokenizer) -> list[BenchRequest]:
    """The spec's `num_prompts` requests, deterministic for a given seed and dataset."""
    if spec.dataset_name == "random":
        return random_requests(
            tokenizer,
            spec.num_prompts,
            input_len=spec.random_input_len,
            output_len=spec.random_output_len,
            range_ratio=spec.random_range_ratio,
            seed=spec.seed,
        )
    if spec.dataset_name == "longdoc":
        return _longdoc_requests(spec, tokenizer)
    assert spec.dataset_path is not None  # the spec's validator requires it
    if spec.dataset_name == "sharegpt":
        return sharegpt_requests(
            spec.dataset_path,
            tokenizer,
            spec.num_prompts,
            output_len=spec.sharegpt_output_len,
            seed=spec.seed,
            ignore_eos=spec.ignore_eos,
        )
    return jsonl_requests(
        spec.dataset_path,
        tokenizer,
        spec.num_prompts,
        chat=spec.endpoint == "/v1/chat/completions",
        ignore_eos=spec.ignore_eos,
    )


# ---- random ---------------------------------------------------------------------------------


def random_requests(
    tokenizer: HFTokenizer,
    num_prompts: int,
    *,
    input_len: int,
    output_len: int,
    range_ratio: float,
    seed: int,
    standin: bool | None = None,
) -> list[BenchRequest]:
    """Prompts of exact token length, lengths uniform in [len*(1-r), len*(1+r)], ignore_eos.

    Token i of prompt k is allowed_tokens[(offset_k + k + i) % n_allowed] (special tokens
    excluded); the text is decoded, re-encoded and adjusted until it is exactly the drawn
    length, as vLLM's RandomDataset does, with the same numpy generator draws.

    A stand-in tokenizer (`standin`; None: a vocabulary under STANDIN_VOCAB_BELOW) draws the
    offsets over PRODUCTION_VOCAB and writes each prompt's start in its first tokens
    (`_start_tag`): two prompts share a first KV block as often as over the production
    vocabulary (almost never), not as over 1,024 tokens (226 of 500 prompts).
    """
    num_special = int(tokenizer.num_special_tokens_to_add())
    real_input_len = max(0, input_len - num_special)
    in_low = math.floor(real_input_len * (1 - range_ratio))
    in_high = math.ceil(real_input_len * (1 + range_ratio))
    out_low = max(math.floor(output_len * (1 - range_ratio)), 1)
    out_high = max(math.ceil(output_len * (1 + range_ratio)), 1)
    if in_low < 1:
        raise UserError(
            f"--random-input-len {input_len} is too small: with {num_special} special tokens "
            f"and range ratio {range_ratio} a prompt could have no tokens"
        )
    rng = np.random.default_rng(seed)
    input_lens = rng.integers(in_low, in_high + 1, size=num_prompts)
    output_lens = rng.integers(out_low, out_high + 1, size=num_prompts)
    vocab_size = int(tokenizer.vocab_size)
    standin = vocab_size < STANDIN_VOCAB_BELOW if standin is None else standin
    space = PRODUCTION_VOCAB if standin else vocab_size
    offsets = rng.integers(0, space, size=num_prompts)
    allowed = np.setdiff1d(np.arange(vocab_size), np.asarray(tokenizer.all_special_ids))
    requests: list[BenchRequest] = []
    digits: list[int] = []
    for k in range(num_prompts):
        target = int(input_lens[k])
        start = int(offsets[k]) + k
        ids = allowed[(start + np.arange(target)) % len(allowed)].tolist()
        if standin:
            digits = digits if k else _word_tokens(tokenizer, allowed)
            tag = _start_tag(start % space, digits, space)
            ids[: len(tag)] = tag[:target]
        prompt, ids = exact_length_prompt(
            tokenizer, ids, target, partial(_random_ids, rng, vocab_size)
        )
        requests.append(BenchRequest(prompt, len(ids), int(output_lens[k]), ignore_eos=True))
    return requests


def _word_tokens(tokenizer: HFTokenizer, allowed: np.ndarray) -> list[int]:
    """The allowed tokens that are a word (a space, then letters) and decode and re-encode to
    themselves: digits whose text stays apart (a byte token alone decodes to U+FFFD)."""
    words = []
    for t in allowed.tolist():
        text = decode(tokenizer, [t])
        word = len(text) > 1 and text[0] == " " and text[1:].isalpha()
        if word and tokenizer.encode(text, add_special_tokens=False) == [t]:
            words.append(t)
    return words or allowed.tolist()


def _start_tag(start: int, digits: list[int], space: int) -> list[int]:
    """`start` (< space) written in base len(digits) with these tokens as digits: distinct
    starts give distinct first tokens however small the vocabulary."""
    base, out = max(len(digits), 2), []
    for _ in range(max(1, math.ceil(math.log(space) / math.log(base)))):
        start, digit = divmod(start, base)
        out.append(int(digits[digit % len(digits)]))
    return out[::-1]


def _random_ids(rng: np.random.Generator, vocab_size: int, n: int) -> list[int]:
    """vLLM's padding of a random prompt that re-encoded short: n ids drawn from the vocab."""
    ids: list[int] = rng.integers(0, vocab_size, size=n).tolist()
    return ids


# ---- sharegpt -------------------------------------------------------------------------------


def sharegpt_requests(
    path: str,
    tokenizer: HFTokenizer,
    num_prompts: int,
    *,
    output_len: int | None,
    seed: int,
    ignore_eos: bool = False,
) -> list[BenchRequest]:
    """First human turn as prompt, first reply's length as output (unless fixed), with
    vLLM's shuffle (Python `random` seeded with `seed`), filter and oversampling."""
    data = _read_json(path)
    if not isinstance(data, list):
        raise UserError(f"{path}: a ShareGPT file must hold a JSON list of conversations")
    entries = [
        (i, e)
        for i, e in enumerate(data)
        if isinstance(e, dict)
        and isinstance(e.get("conversations"), list)
        and len(e["conversations"]) >= 2
    ]
    random.Random(seed).shuffle(entries)
    requests: list[BenchRequest] = []
    for index, entry in entries:
        if len(requests) >= num_prompts:
            break
        try:
            prompt = entry["conversations"][0]["value"]
            completion = entry["conversations"][1]["value"]
            if not isinstance(prompt, str) or not isinstance(completion, str):
                raise TypeError("value is not a string")
        except (KeyError, TypeError) as exc:
            raise UserError(
                f"{path}: conversation {index}: its first two turns need a string 'value' ({exc})"
            ) from None
        prompt_len = len(tokenizer(prompt).input_ids)
        out_len = len(tokenizer(completion).input_ids) if output_len is None else output_len
        too_short = prompt_len < SHAREGPT_MIN_LEN or (
            output_len is None and out_len < SHAREGPT_MIN_LEN
        )
        too_long = (
            prompt_len > SHAREGPT_MAX_PROMPT_LEN or prompt_len + out_len > SHAREGPT_MAX_TOTAL_LEN
        )
        if not (too_short or too_long):
            requests.append(BenchRequest(prompt, prompt_len, out_len, ignore_eos))
    if not requests:
        raise UserError(f"{path}: no conversation passes vLLM's ShareGPT length filter")
    if len(requests) < num_prompts:  # vLLM oversamples with `random` reseeded
        rng = random.Random(seed)
        requests += [rng.choice(requests) for _ in range(num_prompts - len(requests))]
    return requests


def _read_json(path: str) -> object:
    text = _read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: line {exc.lineno}: malformed JSON: {exc.msg}") from None


def _read_text(path: str) -> str:
    p = Path(path).expanduser()
    if not p.is_file():
        raise UserError(f"dataset file not found: {path}")
    try:
        return p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read dataset file {path}: {exc}") from None


# ---- jsonl ----------------------------------------------------------------------------------


def jsonl_requests(
    path: str, tokenizer: HFTokenizer, num_prompts: int, *, chat: bool, ignore_eos: bool = False
) -> list[BenchRequest]:
    """One request per non-blank line: {"prompt": str} or {"messages": [{role, content}]},
    with an optional "output_len" (vLLM's custom dataset name "output_tokens" also works).

    Requests keep file order and repeat from the top when `num_prompts` exceeds the lines.
    Messages sent to /v1/completions are rendered with the tokenizer's chat template.
    """
    lines = [(n, line) for n, line in enumerate(_read_text(path).splitlines(), 1) if line.strip()]
    if not lines:
        raise UserError(f"{path}: the dataset has no requests")
    items = [(f"{path}:{n}", _jsonl_item(f"{path}:{n}", line)) for n, line in lines]
    parsed = [
        _jsonl_request(where, prompt, output_len, tokenizer, chat, ignore_eos)
        for where, (prompt, output_len) in items[:num_prompts]
    ]
    return [parsed[i % len(parsed)] for i in range(num_prompts)]


def _jsonl_item(where: str, line: str) -> tuple[str | ChatMessages, int | None]:
    """Parse and check one line (every line is checked, even beyond `num_prompts`): its
    prompt (a string `prompt`, else its chat `messages`) and output length."""
    try:
        item = json.loads(line)
    except json.JSONDecodeError as exc:
        raise UserError(f"{where}: malformed JSON: {exc.msg}") from None
    if not isinstance(item, dict):
        raise UserError(f"{where}: each line must be a JSON object")
    output_len = item.get("output_len", item.get("output_tokens"))
    if output_len is not None and (
        isinstance(output_len, bool) or not isinstance(output_len, int) or output_len < 1
    ):
        raise UserError(f"{where}: output_len must be a positive integer, got {output_len!r}")
    prompt, messages = item.get("prompt"), item.get("messages")
    if isinstance(prompt, str):
        return prompt, output_len
    if not _is_chat(messages):
        raise UserError(
            f"{where}: needs a string 'prompt' or 'messages' (a list of {{role, content}})"
        )
    return messages, output_len


def _jsonl_request(
    where: str,
    prompt: str | ChatMessages,
    output_len: int | None,
    tokenizer: HFTokenizer,
    chat: bool,
    ignore_eos: bool,
) -> BenchRequest:
    if isinstance(prompt, str):
        prompt_len = len(tokenizer(prompt).input_ids)
        return BenchRequest(prompt, prompt_len, output_len, ignore_eos)
    if not getattr(tokenizer, "chat_template", None):
        raise UserError(f"{where}: chat 'messages' need a tokenizer with a chat template")
    rendered = chat_text(tokenizer, prompt)
    prompt_len = len(tokenizer(rendered, add_special_tokens=False).input_ids)
    return BenchRequest(prompt if chat else rendered, prompt_len, output_len, ignore_eos)


def _is_chat(messages: object) -> TypeGuard[ChatMessages]:
    return (
        isinstance(messages, list)
        and bool(messages)
        and all(
            isinstance(m, dict)
            and isinstance(m.get("role"), str)
            and isinstance(m.get("content"), str)
            for m in messages
        )
    )

"""Load a Hugging Face tokenizer from a local directory, never from the network.

Two loaders, one directory format:
- `load_tokenizer`: transformers' AutoTokenizer, exactly what `vllm bench serve` uses, for
  the workload (prompts built to an exact token length must match vLLM's own counts);
- `load_counter`: the same `tokenizer.json` through the `tokenizers` library, for the
  simulated server, which only counts prompt tokens and names output tokens. It adds about
  0.03 s of CPU to a start of `tuner sim serve` where transformers' import and load cost
  about 1.4 s (`benchmarks/sim_startup.py`, docs/performance.md), and the simulated engine
  starts once per trial. Chat templates are rendered with jinja2 as transformers renders
  them (a sandbox, `trim_blocks`/`lstrip_blocks`, the special tokens as variables), then
  encoded without special tokens; a template that needs more (tools, custom filters) falls
  back to transformers, loaded then.

The workload's tokenizer is typed as transformers' own (`HFTokenizer`); `decode`,
`chat_text` and `chat_ids` narrow the few calls transformers types for a batch too.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from tuner.errors import UserError

if TYPE_CHECKING:
    from jinja2 import Template
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerBase

# The workload's tokenizer: transformers' own, as `vllm bench serve` loads it (`load_tokenizer`)
HFTokenizer: TypeAlias = "PreTrainedTokenizerBase"


def load_tokenizer(path: str) -> HFTokenizer:
    """transformers' AutoTokenizer from `path`, offline; a missing or bad dir is a UserError."""
    directory = _directory(path)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    # Imported here: transformers takes seconds to import, and its env vars must be set first.
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UserError(f"cannot load a tokenizer from {path}: {_first_line(exc)}") from exc


def decode(tokenizer: HFTokenizer, ids: list[int]) -> str:
    """The text of one sequence of ids (transformers types `decode` for a batch too)."""
    text = tokenizer.decode(ids)
    assert isinstance(text, str)  # one sequence in, one text out
    return text


def chat_text(tokenizer: HFTokenizer, messages: Sequence[Mapping[str, str]]) -> str:
    """Chat messages through the tokenizer's chat template, with the generation prompt."""
    text = tokenizer.apply_chat_template(
        [dict(m) for m in messages], add_generation_prompt=True, tokenize=False
    )
    assert isinstance(text, str)  # not tokenized: one text
    return text


def chat_ids(tokenizer: HFTokenizer, messages: Sequence[Mapping[str, str]]) -> list[int]:
    """The token ids of chat messages through the chat template, with the generation prompt
    (a list of ids, or an encoding holding them, by transformers' version)."""
    ids = tokenizer.apply_chat_template(
        [dict(m) for m in messages], add_generation_prompt=True, tokenize=True
    )
    found: Any = ids["input_ids"] if isinstance(ids, Mapping) else ids
    return [int(i) for i in found]


def load_counter(path: str) -> TokenCounter | HFTokenizer:
    """A `TokenCounter` when `path` holds a `tokenizer.json`, else transformers' tokenizer
    (`load_tokenizer`): both answer the calls `tuner.sim.text.TokenText` makes."""
    directory = _directory(path)
    if not (directory / "tokenizer.json").is_file():
        return load_tokenizer(path)
    from tokenizers import Tokenizer

    try:
        backend = Tokenizer.from_file(str(directory / "tokenizer.json"))
    except Exception as exc:  # the Rust library raises bare Exceptions on a bad file
        raise UserError(f"cannot load a tokenizer from {path}: {_first_line(exc)}") from exc
    return TokenCounter(path, backend)


def served_counter(tokenizer: str | None, model_path: str) -> TokenCounter | HFTokenizer | None:
    """The simulated server's tokenizer (`load_counter`), as `vllm serve` picks one: the given
    dir, else the model's directory (a hub id's cached snapshot) when it has one, else none
    (word counts)."""
    from tuner.spec.model_source import model_dir

    if tokenizer:
        return load_counter(tokenizer)
    directory = model_dir(model_path)
    if directory is not None and (directory / "tokenizer.json").is_file():
        return load_counter(str(directory))
    return None


class TokenCounter:
    """Counts and decodes with `tokenizer.json`'s own pipeline (normalizer, pre-tokenizer,
    model, post-processor: the same backend transformers' fast tokenizers wrap); renders a
    chat template with transformers, loaded on first use."""

    def __init__(self, path: str, backend: Tokenizer) -> None:
        self.path = path
        self.backend = backend

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        return {"input_ids": self.encode(text, add_special_tokens=add_special_tokens)}

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self.backend.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: list[int]) -> str:
        return self.backend.decode(ids, skip_special_tokens=False)

    @property
    def vocab_size(self) -> int:
        """The base vocabulary, without added tokens (transformers' `vocab_size`)."""
        return self.backend.get_vocab_size(with_added_tokens=False)

    def __len__(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    @cached_property
    def chat_template(self) -> str | None:
        """The template in tokenizer_config.json or chat_template.jinja, if any."""
        return chat_template_of(Path(self.path).expanduser())

    def apply_chat_template(
        self,
        messages: Sequence[object],
        *,
        add_generation_prompt: bool = False,
        tokenize: bool = True,
    ) -> Any:
        """The rendered chat (its token ids with `tokenize`), as transformers gives it."""
        try:
            text = self._template.render(
                messages=messages, add_generation_prompt=add_generation_prompt, **self._specials
            )
        except Exception:  # anything the plain render cannot do: transformers' own
            return self._full.apply_chat_template(
                messages, add_generation_prompt=add_generation_prompt, tokenize=tokenize
            )
        return self.encode(text, add_special_tokens=False) if tokenize else text

    @cached_property
    def _template(self) -> Template:
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message: str) -> None:
            raise ValueError(message)

        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
        )
        env.globals["raise_exception"] = raise_exception
        return env.from_string(self.chat_template or "")

    @cached_property
    def _specials(self) -> dict[str, str]:
        """bos_token, eos_token, ... from tokenizer_config.json, as template variables."""
        try:
            path = Path(self.path).expanduser() / "tokenizer_config.json"
            config = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        out = {}
        for name in ("bos_token", "eos_token", "unk_token", "pad_token"):
            value = config.get(name) if isinstance(config, dict) else None
            if isinstance(value, dict):  # {"content": ...} in older configs
                value = value.get("content")
            if isinstance(value, str):
                out[name] = value
        return out

    @cached_property
    def _full(self) -> Any:
        return load_tokenizer(self.path)


def chat_template_of(directory: Path) -> str | None:
    """The chat template a tokenizer directory ships (chat_template.jinja, else
    tokenizer_config.json's `chat_template`), the one vLLM's chat endpoint renders; None."""
    jinja = directory / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    try:
        config = json.loads((directory / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    template = config.get("chat_template") if isinstance(config, dict) else None
    return template if isinstance(template, str) and template else None


def _directory(path: str) -> Path:
    directory = Path(path).expanduser()
    if not directory.is_dir():
        raise UserError(f"tokenizer directory not found: {path}")
    return directory


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]

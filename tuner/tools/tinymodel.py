"""A tiny Qwen2-shaped model directory, made offline in seconds.

vLLM serves it with `--load-format dummy` (random weights of the right shape), so the timings
are those of a real engine without downloading anything. The tokenizer is a byte-level BPE
trained on the spot from a corpus generated here, so every build gives identical files.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path

from tokenizers import (
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)

from tuner.spec.outputs import make_output_dir

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"
BOS_TOKEN = "<|endoftext|>"

# Qwen's ChatML template: what `vllm serve` applies for /v1/chat/completions.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

_WORDS = """
the of and to in is that for it as was with be by on not he this are or his from at which
but have an they you were her she there been one all we their has would when if so no will
more can out up into do any your what some time about them other than then its only new
these may could two first very after like made over such where most should also through
between many those before must back well just much over under people world life year work
model token server request engine cache memory block batch prefill decode stream latency
throughput tuner study trial score flag config sample queue budget limit scheduler step
river mountain garden morning evening window letter music paper market school village
quick brown fox jumps lazy dog small large green blue silver golden quiet bright ancient
walk read write build carry listen answer follow remember travel measure explain gather
""".split()

_SYLLABLES = (
    "ka ro mi te su na lo ve di pa ser tan bel cor vin dal mor ith ent ous ing tion er an"
).split()


def _corpus(seed: int, n_sentences: int = 4000) -> Iterator[str]:
    """English-ish sentences: common words, made-up words, numbers and punctuation."""
    rng = random.Random(seed)
    for _ in range(n_sentences):
        words = []
        for _ in range(rng.randint(4, 18)):
            r = rng.random()
            if r < 0.75:
                words.append(rng.choice(_WORDS))
            elif r < 0.92:
                words.append("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4))))
            else:
                words.append(str(rng.randint(0, 2048)))
        words[0] = words[0].capitalize()
        yield " ".join(words) + rng.choice([".", ".", ".", "?", "!", ",", ";"])


# Qwen2's split (its tokenizer.json, and the pipeline transformers' Qwen2Tokenizer builds).
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _train_tokenizer(vocab_size: int, seed: int) -> Tokenizer:
    """Qwen2's pipeline (NFC, its split, byte-level BPE), so that `tokenizer.json` alone
    encodes as transformers' Qwen2Tokenizer does (`tuner.workload.tokenizer.load_counter`)."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_QWEN2_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(seed), trainer=trainer)
    return tok


def model_config(vocab_size: int, eos_token_id: int, bos_token_id: int) -> dict[str, object]:
    """The Qwen2 config of brief §5: 2 layers, hidden 128, 4 heads, 2 KV heads, bf16."""
    return {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "vocab_size": vocab_size,
        "max_position_embeddings": 4096,
        "max_window_layers": 2,
        "use_sliding_window": False,
        "sliding_window": None,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "tie_word_embeddings": False,
        "use_cache": True,
        "bos_token_id": bos_token_id,
        "eos_token_id": eos_token_id,
        "torch_dtype": "bfloat16",
    }


def tokenizer_config(tok: Tokenizer) -> dict[str, object]:
    """What transformers' AutoTokenizer needs offline, Qwen-style (no BOS added to prompts)."""
    added = {
        str(tok.token_to_id(t)): {
            "content": t,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for t in SPECIAL_TOKENS
    }
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": added,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None,
        "eos_token": EOS_TOKEN,
        "pad_token": PAD_TOKEN,
        "unk_token": None,
        "add_bos_token": False,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 4096,
        "errors": "replace",
        "split_special_tokens": False,
        "chat_template": CHAT_TEMPLATE,
    }


def _token_id(tok: Tokenizer, token: str) -> int:
    """A special token's id: the trainer always puts SPECIAL_TOKENS in the vocabulary."""
    found = tok.token_to_id(token)
    assert found is not None, token
    return found


def make_tiny_model(out_dir: Path, *, vocab_size: int = 1024, seed: int = 0) -> Path:
    """Write config.json, generation_config.json, tokenizer.json and tokenizer_config.json.

    The same arguments always give byte-identical files. Returns `out_dir`.
    """
    out_dir = make_output_dir(out_dir, "make-tiny-model:")  # a file or /proc/x: one line
    tok = _train_tokenizer(vocab_size, seed)
    eos_id, bos_id = _token_id(tok, EOS_TOKEN), _token_id(tok, BOS_TOKEN)
    files = {
        "config.json": model_config(vocab_size, eos_id, bos_id),
        "generation_config.json": {"bos_token_id": bos_id, "eos_token_id": [eos_id]},
        "tokenizer_config.json": tokenizer_config(tok),
    }
    for name, data in files.items():
        (out_dir / name).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    (out_dir / "tokenizer.json").write_text(tok.to_str(pretty=True) + "\n")
    return out_dir

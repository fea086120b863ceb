"""The tiny Qwen2 model directory: deterministic, complete, and loadable offline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tuner.cli import main
from tuner.tools.tinymodel import CHAT_TEMPLATE, EOS_TOKEN, make_tiny_model
from tuner_testing import vllm_run

FILES = ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"]


def test_same_arguments_give_identical_files(tmp_path: Path, tiny_model_dir: Path) -> None:
    again = make_tiny_model(tmp_path / "again")
    assert sorted(p.name for p in again.iterdir()) == FILES
    for name in FILES:
        assert (again / name).read_bytes() == (tiny_model_dir / name).read_bytes(), name


def test_another_seed_gives_another_tokenizer(tmp_path: Path, tiny_model_dir: Path) -> None:
    other = make_tiny_model(tmp_path / "other", seed=1)
    assert (other / "tokenizer.json").read_text() != (tiny_model_dir / "tokenizer.json").read_text()
    assert (other / "config.json").read_text() == (tiny_model_dir / "config.json").read_text()


def test_config_has_the_brief_shape(tiny_model_dir: Path) -> None:
    config = json.loads((tiny_model_dir / "config.json").read_text())
    assert config["architectures"] == ["Qwen2ForCausalLM"]
    expected = {
        "model_type": "qwen2",
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "vocab_size": 1024,
        "torch_dtype": "bfloat16",
    }
    assert {k: config[k] for k in expected} == expected
    assert config["hidden_size"] == config["num_attention_heads"] * config["head_dim"]
    assert config["max_position_embeddings"] >= 1024


def test_tokenizer_loads_offline_and_round_trips(tiny_model_dir: Path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    assert len(tok) == 1024
    assert tok.eos_token == EOS_TOKEN
    config = json.loads((tiny_model_dir / "config.json").read_text())
    assert tok.eos_token_id == config["eos_token_id"]
    text = "The quick brown fox measured 42 tokens, then stopped!"
    ids = tok(text).input_ids
    assert tok.decode(ids) == text
    assert len(ids) < len(text) / 2, "trained merges compress English-ish text"
    assert all(0 <= i < 1024 for i in ids)
    assert tok.convert_tokens_to_ids("<|im_start|>") < 1024


@pytest.mark.vllm_env  # starts no vLLM server: not in the real-vLLM group
def test_chat_template_renders_chatml_in_the_vllm_env(tiny_model_dir: Path, vllm_python) -> None:
    """Rendered by the vLLM environment's transformers, which is what the server uses."""
    code = (
        "import sys; from transformers import AutoTokenizer\n"
        "tok = AutoTokenizer.from_pretrained(sys.argv[1])\n"
        "print(tok.apply_chat_template([{'role': 'user', 'content': 'Hi there'}],"
        " tokenize=False, add_generation_prompt=True), end='')\n"
    )
    done = vllm_run(
        [str(vllm_python), "-c", code, str(tiny_model_dir)],
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"
    )
    config = json.loads((tiny_model_dir / "tokenizer_config.json").read_text())
    assert config["chat_template"] == CHAT_TEMPLATE


def test_vocab_size_option(tmp_path: Path) -> None:
    out = make_tiny_model(tmp_path / "small", vocab_size=512)
    assert json.loads((out / "config.json").read_text())["vocab_size"] == 512
    assert len(json.loads((out / "tokenizer.json").read_text())["model"]["vocab"]) == 512


def test_cli_make_tiny_model(tmp_path: Path, tiny_model_dir: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["make-tiny-model", str(tmp_path / "cli-model")])
    assert exit_info.value.code == 0
    assert "wrote tiny Qwen2 model" in capsys.readouterr().out
    for name in FILES:
        assert (tmp_path / "cli-model" / name).read_bytes() == (tiny_model_dir / name).read_bytes()

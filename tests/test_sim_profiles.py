"""Model and accelerator profiles: built-in shapes, config.json reading, bad input."""

from __future__ import annotations

import json

import pytest

from tuner.errors import UserError
from tuner.sim.profiles import GPUS, GiB, get_gpu, load_model


def test_builtin_32b_shape_gives_the_briefs_figures():
    m = load_model("deepseek-r1-distill-qwen-32b")
    assert m.weight_bytes / 1e9 == pytest.approx(65.5, abs=0.2)
    assert m.weight_bytes_per_gpu(4) / 1e9 == pytest.approx(16.4, abs=0.1)
    assert m.kv_bytes_per_token(1) == 256 * 1024
    assert m.kv_bytes_per_token(4) == 64 * 1024


def test_config_json_is_read_like_vllm(tmp_path, tiny_model_dir):
    m = load_model(str(tiny_model_dir))
    assert (m.num_layers, m.hidden_size, m.num_heads, m.num_kv_heads) == (2, 128, 4, 2)
    assert (m.head_dim, m.intermediate_size, m.dtype_bytes) == (32, 256, 2)
    # head_dim falls back to hidden / heads; kv heads to heads
    cfg = {
        "num_hidden_layers": 4,
        "hidden_size": 256,
        "num_attention_heads": 8,
        "intermediate_size": 512,
        "vocab_size": 1000,
        "torch_dtype": "float16",
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    m = load_model(str(tmp_path))
    assert (m.head_dim, m.num_kv_heads) == (32, 8)


def test_missing_fields_are_named(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 128, "vocab_size": 10}))
    with pytest.raises(UserError, match="num_hidden_layers, num_attention_heads, intermediate"):
        load_model(str(tmp_path))


def test_unknown_model_and_gpu_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="neither a built-in name"):
        load_model(str(tmp_path / "nope"))
    with pytest.raises(UserError, match="unknown GPU 'v100'"):
        get_gpu("v100")


def test_gpu_table_covers_the_issue():
    for name in ("a6000", "a100-80g", "h100", "h200", "l40s", "t4", "cpu"):
        gpu = get_gpu(name.upper())
        assert gpu.memory_bytes > 8 * GiB and gpu.bandwidth_bytes_s > 0 and gpu.flops > 0
    assert GPUS["a6000"].bandwidth_bytes_s == 768e9
    assert GPUS["cpu"].platform == "cpu"

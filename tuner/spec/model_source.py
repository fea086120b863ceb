"""Where `engine.model` is on this machine, found as vLLM finds it, never over the network.

vLLM takes a model as a local directory or as a Hugging Face hub id (`org/name`), which it reads
from the local hub cache when the files are there (`HF_HUB_OFFLINE=1`: only there). The cache's
layout is huggingface_hub's: `models--{org}--{name}/refs/main` holds the revision,
`snapshots/<revision>/` its files. The cache folder is found in huggingface_hub's own order of
variables (listed under "Model names as vLLM takes them" in docs/study-file.md), but read from
the environment at each call: `huggingface_hub.constants` reads it once, at import.
"""

from __future__ import annotations

import os
from pathlib import Path

CONFIG = "config.json"
# Hugging Face ids of the simulator's built-in models (`tuner.sim.profiles`): what production's
# `vllm serve` loads (`tuner init`'s `production_model`), and what `tuner sim serve` takes for
# them (the exported command run on the simulator)
BUILTIN_HF_IDS = {
    "deepseek-r1-distill-qwen-32b": "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B",
    "deepseek-r1-0528-qwen3-8b": "deepseek-ai/DeepSeek-R1-0528-Qwen3-8B",
}


def hub_cache_dir() -> Path:
    """The local Hugging Face hub cache, as the environment names it now."""
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(name):
            return _expand(os.environ[name])
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface"
    )
    return _expand(home) / "hub"


def _expand(text: str) -> Path:
    return Path(os.path.expandvars(text)).expanduser()


def hub_snapshot(repo_id: str) -> Path | None:
    """The cached snapshot (`refs/main`, vLLM's default revision) of hub id `repo_id` that
    holds a `config.json`; None when it is not cached or is not a hub id at all."""
    # huggingface_hub comes with transformers (a dependency); imported only for a name that
    # is neither built in nor a directory
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo_id, CONFIG, cache_dir=hub_cache_dir())
    except ValueError:  # HFValidationError: not a repo id ("a/b/c", spaces, "..")
        return None
    return Path(found).parent if isinstance(found, str) else None


def model_dir(model: str) -> Path | None:
    """The directory vLLM loads `model` from: a local directory, else the cached snapshot of
    the hub id; None when neither is here (a name of another engine's, or not cached)."""
    text = model.strip()
    if not text:
        return None
    path = Path(text).expanduser()
    if path.is_dir():
        return path
    if path.exists() or text.startswith(("/", "~", ".")):
        return None  # a file, or a path that is not there: not a hub id
    return hub_snapshot(text)


def model_config(model: str) -> Path | None:
    """`config.json` of `model_dir(model)`, when there is one."""
    directory = model_dir(model)
    config = directory / CONFIG if directory is not None else None
    return config if config is not None and config.is_file() else None


def tokenizer_source(tokenizer: str | None, model: str) -> str:
    """What the workload's tokenizer is loaded from: `tokenizer` when given, else the
    model's directory (a hub id's cached snapshot), else the model as named (missing)."""
    if tokenizer:
        return tokenizer
    directory = model_dir(model)
    return str(directory) if directory is not None else model

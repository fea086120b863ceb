"""Helper commands that prepare what studies and tests need."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def make_tiny_model(
    out_dir: Annotated[Path, typer.Argument(help="Directory to write the model files into.")],
    vocab_size: Annotated[int, typer.Option(min=300, help="Tokenizer and embedding size.")] = 1024,
    seed: Annotated[int, typer.Option(help="Seed of the generated tokenizer corpus.")] = 0,
) -> None:
    """Write a tiny Qwen2-shaped model (config + trained tokenizer) for `--load-format dummy`."""
    from tuner.tools.tinymodel import make_tiny_model as build

    path = build(out_dir, vocab_size=vocab_size, seed=seed)
    typer.echo(f"wrote tiny Qwen2 model to {path}")

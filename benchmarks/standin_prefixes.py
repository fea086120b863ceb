"""Random prompts over a stand-in tokenizer: how many share their first KV block.

The tiny test model's tokenizer (1,024 tokens) with vLLM's RandomDataset draws against the
same draws with the start written over a production-sized space (`standin`, the default for
a vocabulary under 16,384; docs/datasets.md, "Stand-in tokenizers"): prompts whose first
16-token block another prompt also has, and the share of prompt tokens an empty unbounded
cache would hit (`tuner.workload.cold.implied_hit_rate`). Deterministic.

    nice .venv/bin/python benchmarks/standin_prefixes.py [--prompts 500] [--input-len 512]
"""

from __future__ import annotations

import argparse
import collections
from pathlib import Path

from tuner.workload.cold import implied_hit_rate
from tuner.workload.datasets import random_requests
from tuner.workload.tokenizer import load_tokenizer

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=500)
    ap.add_argument("--input-len", type=int, default=512)
    args = ap.parse_args()
    tok = load_tokenizer(str(REPO / ".cache" / "tiny-qwen2"))
    print(f"tokenizer vocab {tok.vocab_size}; {args.prompts} prompts of {args.input_len} tokens\n")
    print("| draws | prompts sharing their first 16-token block | implied hit rate |")
    print("| --- | --- | --- |")
    for label, standin in (("vLLM's RandomDataset", False), ("stand-in (default)", True)):
        reqs = random_requests(
            tok, args.prompts, input_len=args.input_len, output_len=16, range_ratio=0.0,
            seed=0, standin=standin,
        )  # fmt: skip
        ids = [tok(r.prompt).input_ids for r in reqs]
        firsts = collections.Counter(tuple(i[:16]) for i in ids)
        shared = sum(n for n in firsts.values() if n > 1)
        print(f"| {label} | {shared} of {len(ids)} | {implied_hit_rate(ids):.2%} |")


if __name__ == "__main__":
    main()

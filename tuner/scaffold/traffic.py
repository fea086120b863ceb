"""The traffic `tuner init` writes: a workload and its default SLOs, per kind.

- `chat`: 200 random prompts and answers (vLLM's RandomDataset, `random_range_ratio` 0.5; the
  lengths: docs/study-file.md, "tuner init"), sent as user messages on /v1/chat/completions,
  rendered by the engine through the model's template (`with_template`);
- `longdoc`: the long-document QA mix (docs/datasets.md), lengths that fit the model, 64
  prompts of 1024-token answers;
- `FILE.jsonl`: the file's requests (docs/datasets.md, `jsonl`), every line once.

Default SLOs, when `--slo` gives none: chat and a file, P99 TTFT ≤ 2 s and mean TPOT ≤ 80 ms
(an interactive service: the first token within 2 s, then faster than one reads);
longdoc, P99 TTFT ≤ 20 s (a 32k-token prompt takes seconds to prefill) and mean TPOT ≤ 80 ms.
They are the shipped studies' (studies/a6000x4-*.yaml).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from tuner.errors import UserError
from tuner.spec.parsing import near_file
from tuner.spec.suggest import did_you_mean
from tuner.spec.workload import LONGDOC_LENGTHS, LONGDOC_OUTPUT_LEN, MAX_PROMPTS, WorkloadSpec
from tuner.workload.client import CHAT_ENDPOINT
from tuner.workload.tokenizer import chat_template_of

KINDS = ("chat", "longdoc")
CHAT_SLO = ("p99_ttft_ms<=2000", "mean_tpot_ms<=80")
LONGDOC_SLO = ("p99_ttft_ms<=20000", "mean_tpot_ms<=80")
CHAT_PROMPTS = 200
LONGDOC_PROMPTS = 64
FILE_PROMPTS_MAX = 1000  # a longer file: its first 1000 requests (--num-prompts for more)


@dataclass
class Traffic:
    """A workload section (without its rate and tokenizer) and its default SLOs."""

    kind: str  # chat, longdoc or jsonl
    workload: dict[str, object]
    slo: tuple[str, ...]
    notes: list[str] = field(default_factory=list)


def traffic(
    text: str,
    max_len: int,
    num_prompts: int | None,
    lengths: tuple[int | None, int | None] = (None, None),
) -> Traffic:
    """`--traffic`: chat, longdoc or a JSONL file; `max_len` is the model's length limit
    (prompt plus output), `num_prompts` `--num-prompts` (None: the kind's default); `lengths`
    `--input-len` and `--output-len` (chat only): every prompt and answer of exactly those
    lengths (`random_range_ratio` 0, `vllm bench serve`'s default), the other the kind's own."""
    if text == "chat":
        w = {
            "endpoint": CHAT_ENDPOINT,
            "dataset_name": "random",
            "random_input_len": 1024,
            "random_output_len": 256,
            "random_range_ratio": 0.5,
            "num_prompts": num_prompts or CHAT_PROMPTS,
        }
        if lengths != (None, None):
            w["random_input_len"] = lengths[0] or w["random_input_len"]
            w["random_output_len"] = lengths[1] or w["random_output_len"]
            w["random_range_ratio"] = 0.0
        return Traffic("chat", w, CHAT_SLO)
    if text == "longdoc":
        return _longdoc(max_len, num_prompts)
    path = Path(text).expanduser()
    if path.suffix != ".jsonl" or not path.is_file():
        if path.suffix == ".jsonl":
            raise UserError(f"--traffic {text}: file not found{near_file(path)}")
        hint = did_you_mean(text, KINDS)
        raise UserError(f"--traffic {text}: give chat, longdoc or FILE.jsonl{hint}")
    lines, chat = _jsonl_shape(path)
    w = {
        "endpoint": "/v1/chat/completions" if chat else "/v1/completions",
        "dataset_name": "jsonl",
        "dataset_path": str(path.resolve()),
        "num_prompts": num_prompts or min(lines, FILE_PROMPTS_MAX),
    }
    return Traffic("jsonl", w, CHAT_SLO)


def with_template(mix: Traffic, tokenizer_dir: Path | None) -> Traffic:
    """Chat traffic goes to /v1/chat/completions, each prompt one user message that the engine
    renders through the model's chat template (`vllm bench serve --backend openai-chat
    --endpoint /v1/chat/completions`). A tokenizer known to ship no template would have vLLM
    refuse every request: then the prompts go to /v1/completions as they are, and a note says
    so. Unknown (a hub id not on disk): the engine's own tokenizer decides."""
    if mix.kind != "chat" or tokenizer_dir is None or chat_template_of(tokenizer_dir):
        return mix
    note = (
        f"chat traffic as plain prompts on /v1/completions: the tokenizer in {tokenizer_dir} "
        "has no chat template for /v1/chat/completions (--tokenizer DIR for one with a template)"
    )
    workload = {**mix.workload, "endpoint": "/v1/completions"}
    return Traffic(mix.kind, workload, mix.slo, [*mix.notes, note])


def traffic_words(w: WorkloadSpec) -> str:
    """The workload in words, for the rate's note: "200 random prompts of 1024±50% tokens, ..."."""
    if w.dataset_name == "random":
        r = w.random_range_ratio
        if r == 0:
            return (
                f"{w.num_prompts} random prompts of {w.random_input_len} tokens, answers of "
                f"{w.random_output_len}"
            )
        return (
            f"{w.num_prompts} random prompts of {w.random_input_len}±{r:.0%} tokens, "
            f"answers of {w.random_output_len}±{r:.0%}"
        )
    if w.dataset_name == "longdoc":
        lengths = "/".join(map(str, w.longdoc_lengths))
        return (
            f"{w.num_prompts} long documents of {lengths} tokens, answers of {w.longdoc_output_len}"
        )
    return f"{w.num_prompts} requests of {w.dataset_path}"


def _longdoc(max_len: int, num_prompts: int | None) -> Traffic:
    output = LONGDOC_OUTPUT_LEN
    lengths = [n for n in LONGDOC_LENGTHS if n + output <= max_len]
    if not lengths:
        raise UserError(
            f"--traffic longdoc: the model takes at most {max_len} tokens, too few for the "
            f"shortest document ({LONGDOC_LENGTHS[0]}) and its {output}-token answer"
        )
    w = {
        "endpoint": "/v1/completions",
        "dataset_name": "longdoc",
        "longdoc_lengths": lengths,
        "longdoc_output_len": output,
        "num_prompts": num_prompts or LONGDOC_PROMPTS,
    }
    notes = []
    if len(lengths) < len(LONGDOC_LENGTHS):
        notes.append(
            f"longdoc lengths {', '.join(map(str, lengths))}: the model's {max_len} tokens "
            f"hold no longer document with a {output}-token answer"
        )
    return Traffic("longdoc", w, LONGDOC_SLO, notes)


def _jsonl_shape(path: Path) -> tuple[int, bool]:
    """How many requests the file holds, and whether the first is chat `messages`."""
    try:
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"--traffic {path}: cannot read it: {exc}") from None
    if not lines:
        raise UserError(f"--traffic {path}: the file holds no requests")
    if len(lines) > MAX_PROMPTS:
        lines = lines[:MAX_PROMPTS]
    try:
        first = json.loads(lines[0])
    except json.JSONDecodeError as exc:
        raise UserError(f"--traffic {path}:1: malformed JSON: {exc.msg}") from None
    return len(lines), isinstance(first, dict) and "messages" in first

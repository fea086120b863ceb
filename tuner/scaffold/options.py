"""`tuner init`'s options, and the checks that need nothing but the options themselves: they
run before anything slow is imported, so a mistyped option is one line at once."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from tuner.errors import UserError
from tuner.measure.modes import MODES
from tuner.spec import slo
from tuner.spec.inputs import check_model_name
from tuner.spec.outputs import check_output_file
from tuner.spec.sections import MAX_NAME_LEN, MAX_TRIALS

ENGINES = ("sim", "vllm")
OBJECTIVES = ("scalar", "capacity")
MAX_HOURS = 7 * 24.0


@dataclass
class InitOptions:
    """`tuner init`'s options; None: chosen from the box and the simulator."""

    model: str | None = None
    engine: str | None = None
    gpu: str | None = None
    count: int | None = None
    traffic: str = "chat"
    slo: list[str] = field(default_factory=list)
    hours: float = 8.0
    trials: int | None = None
    rate: float | None = None
    num_prompts: int | None = None
    name: str | None = None
    production_model: str | None = None
    tokenizer: str | None = None
    search_space: str | None = None
    objective: str | None = None  # scalar or capacity; None: capacity for longdoc traffic
    max_model_len: int | None = None  # None: what the traffic needs (`tuner.scaffold.model_len`)
    input_len: int | None = None  # random traffic of these lengths (tokens); None: the kind's
    output_len: int | None = None
    concurrency: int | None = None  # a closed loop: `workload.max_concurrency`
    model_config: str | None = None  # a config.json (or its folder): the model's shape
    force: bool = False  # write a night out of reach at any rate (`tuner.scaffold.reach`)

    @property
    def mode(self) -> str:
        """The objective's mode: `--objective`, else capacity for longdoc (a long-document
        service's question is how much traffic it takes), else scalar."""
        if self.objective is not None:
            return self.objective
        return "capacity" if self.traffic == "longdoc" else "scalar"


def check_output(path: Path, force: bool) -> None:
    """The study file to write, as every output is checked (`tuner.spec.outputs`): an
    existing file only with `force`, never a device, a folder or a link to one."""
    check_output_file(path, "-o", force=force)


def check_options(opts: InitOptions) -> None:
    """Each option that is wrong on its face: one UserError naming it."""
    if not 0 < opts.hours <= MAX_HOURS:
        raise UserError(f"--hours {opts.hours:g}: give more than 0 and at most {MAX_HOURS:g}")
    if opts.engine is not None and opts.engine not in ENGINES:
        raise UserError(f"--engine {opts.engine}: give sim or vllm")
    if opts.objective is not None and opts.objective not in OBJECTIVES:
        raise UserError(f"--objective {opts.objective}: give scalar or capacity")
    if opts.count is not None and opts.count < 1:
        raise UserError(f"--count {opts.count}: give at least 1")
    if opts.rate is not None and not 0 < opts.rate < math.inf:
        raise UserError(f"--rate {opts.rate:g}: give a rate in req/s above 0")
    if opts.trials is not None and not 1 <= opts.trials <= MAX_TRIALS:
        raise UserError(f"--trials {opts.trials}: give 1 to {MAX_TRIALS}")
    if opts.name is not None and not re.fullmatch(
        rf"[A-Za-z0-9_.-]{{1,{MAX_NAME_LEN}}}", opts.name
    ):
        raise UserError(
            f"--name {opts.name!r}: letters, digits, '.', '_' and '-', at most "
            f"{MAX_NAME_LEN} characters"
        )
    for option, value in (("--model", opts.model), ("--production-model", opts.production_model)):
        try:
            if value is not None:
                check_model_name(value)
        except ValueError as exc:
            raise UserError(f"{option}: {exc}") from None
    _check_traffic_shape(opts)
    if opts.model_config is not None and not _config_file(opts.model_config).is_file():
        raise UserError(f"--model-config {opts.model_config}: no config.json there")
    for text in opts.slo:
        try:
            slo.check_sense(text)
        except UserError as exc:
            raise UserError(f"--slo {text}: {exc}") from None


def _config_file(path: str) -> Path:
    """`--model-config`: a config.json, or the folder holding one."""
    given = Path(path).expanduser()
    return given / "config.json" if given.is_dir() else given


def _check_traffic_shape(opts: InitOptions) -> None:
    """`--max-model-len`, `--input-len`/`--output-len` and `--concurrency`: positive counts; the
    lengths only for random (chat) traffic; a closed loop never in capacity mode, which
    searches the highest offered rate (`tuner.spec.coherence`)."""
    for option, value in (
        ("--max-model-len", opts.max_model_len),
        ("--input-len", opts.input_len),
        ("--output-len", opts.output_len),
        ("--concurrency", opts.concurrency),
    ):
        if value is not None and value < 1:
            raise UserError(f"{option} {value}: give at least 1")
    given = opts.input_len is not None or opts.output_len is not None
    if given and opts.traffic != "chat":
        raise UserError(
            f"--input-len/--output-len: random prompts of those lengths, chat traffic only; "
            f"--traffic {opts.traffic} has lengths of its own"
        )
    if opts.concurrency is not None and MODES[opts.mode].has_capacity:
        raise UserError(
            f"--concurrency {opts.concurrency}: capacity mode searches the highest request rate, "
            "and a closed loop of N requests sets none: give --objective scalar, or drop "
            "--concurrency"
        )

"""Whether a night can meet its SLO at all, before `tuner init` writes it (issue 49): the
study's requests sent one at a time, the lightest load any rate gives, on the simulator. What
it tries, what `init` then refuses and says, and `--force`: docs/study-file.md, "A night out
of reach".

What callers may assume: every figure is SIMULATED; a latency limit the nearest config breaks
even one request at a time is out of reach at every rate and for every config; only the limits
that ease at lower rates are judged here (latencies, `failed`), while a throughput floor or a
ceiling on `duration` is left to the rate the study is written with (`tuner.scaffold.rate`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from tuner.errors import UserError
from tuner.fidelity.bands import Bands
from tuner.run.cost import length_only_runner
from tuner.runners.trial_runner import TrialContext
from tuner.scaffold.options import InitOptions
from tuner.scaffold.rate import eases_at_lower_rates, held_words
from tuner.sim.profiles import GPUS, known_model
from tuner.spec.slo import SloLimit
from tuner.spec.space import baseline_params, distributions
from tuner.spec.study import StudySpec
from tuner.spec.values import Scalar

# Configs judged one request at a time: vLLM's defaults and this many drawn from the search
# space (seeded: the same study gives the same line). A lone request's time moves little with
# the flags searched (chunk sizes, the block size), so a few stand for the space.
DRAWN = 8
# The most GPUs a lever offers: one node's (tensor parallel past a node is not what init writes)
MAX_COUNT = 8
# The shortest context a lever offers, in tokens
MIN_MODEL_LEN = 4096
# The other GPUs a lever names at most (the nearest to the SLO first)
GPU_LEVERS = 2

Shape = Callable[[InitOptions], StudySpec]


@dataclass(frozen=True)
class Floor:
    """The lightest load's figures (requests one at a time) of the nearest config, and the
    limits they still break."""

    metrics: dict[str, float]
    broken: tuple[SloLimit, ...]

    @property
    def distance(self) -> float:
        """The worst broken limit's figure over its limit (3.2: 3.2× the limit)."""
        return max((_ratio(x, self.metrics) for x in self.broken), default=1.0)


@dataclass(frozen=True)
class Lever:
    """One change the simulator can weigh: its option, and the floor it gives."""

    option: str
    floor: Floor
    spec: StudySpec  # the study the option gives

    @property
    def reaches(self) -> bool:
        return not self.floor.broken


@dataclass(frozen=True)
class OutOfReach:
    """A night whose SLO no config meets at any rate: how far, and what would reach it."""

    spec: StudySpec
    floor: Floor
    levers: tuple[Lever, ...]

    def words(self) -> str:
        """One line: the figures against the limits, the distance, each lever's figure."""
        limits = self.floor.broken
        said = ", ".join(_figure(self.spec, self.floor, x) for x in limits)
        against = ", ".join(str(x) for x in limits)
        head = (
            f"no config meets {against} at any rate (SIMULATED): with the requests sent one at "
            f"a time the nearest config reads {said}, {self.floor.distance:.1f}× the limit"
        )
        if not self.levers:
            return f"{head}; no lever the simulator knows (GPUs, context, answers) changes it"
        reach = [x for x in self.levers if x.reaches]
        short = [x for x in self.levers if not x.reaches]
        parts = [
            f"{lead}: {'; '.join(_lever_words(self.spec, x) for x in levers)}"
            for lead, levers in (("what would reach it", reach), ("not enough alone", short))
            if levers
        ]
        return f"{head}; {'; '.join(parts)}"


def out_of_reach(spec: StudySpec, opts: InitOptions, shape: Shape) -> OutOfReach | None:
    """None when some config meets every latency limit with its requests one at a time;
    else how far the nearest is and the levers (`shape`: the study `opts` would give, as
    `draft_study` shapes it, UserError where it cannot)."""
    floor = lightest(spec)
    if floor is None or not floor.broken:
        return None
    return OutOfReach(spec, floor, tuple(_levers(spec, opts, shape, floor.broken)))


def lightest(spec: StudySpec) -> Floor | None:
    """The nearest config's figures with `spec`'s requests sent one at a time; None: no
    latency limit to judge, or the simulator ran no config."""
    limits = [x for x in spec.slo_limits() if eases_at_lower_rates(x)]
    if not limits or known_model(spec.engine.model) is None:
        return None  # nothing to judge, or no shape to simulate (the preview says so)
    alone = _one_at_a_time(spec)
    if length_only_runner(alone).gpu is None:
        return None
    runs = [m for m in (_measured(alone, p) for p in _configs(alone)) if m]
    if not runs:
        return None
    nearest = min(runs, key=lambda m: max(_ratio(x, m) for x in limits))
    return Floor(nearest, tuple(x for x in limits if not x.met(nearest)))


def _levers(
    spec: StudySpec, opts: InitOptions, shape: Shape, lightest_broken: tuple[SloLimit, ...]
) -> Iterable[Lever]:
    """Each change of the options the simulator can weigh, with its floor; shorter answers
    only where a broken limit is on E2EL (a request's time to its first token, or per token,
    does not hang on how many tokens follow)."""
    base = replace(opts, engine="sim", gpu=spec.hardware.gpu, rate=opts.rate or 1.0, trials=1)
    count = spec.hardware.count or 1
    for more in (2 * count, 4 * count):
        if more <= MAX_COUNT:
            yield from _lever(f"--count {more}", replace(base, count=more), shape)
    others = [
        lever
        for name in GPUS
        # a host without GPU peer-to-peer is no GPU to move to
        if name not in ("cpu", spec.hardware.gpu) and not name.endswith("-nop2p")
        for lever in _lever(f"--gpu {name}", replace(base, gpu=name), shape)
    ]
    yield from sorted(others, key=lambda x: x.floor.distance)[:GPU_LEVERS]
    longest = spec.engine.flags.get("max-model-len")
    if isinstance(longest, int):
        shorter = [
            lever
            for n in _halvings(longest)
            for lever in _lever(f"--max-model-len {n}", replace(base, max_model_len=n), shape)
        ]
        yield from _first_that_reaches(shorter)
    answers = any("e2el" in x.metric for x in lightest_broken)
    if answers and opts.traffic == "chat" and spec.workload.dataset_name == "random":
        out = spec.workload.random_output_len
        shorter = [
            lever
            for n in _halvings(out, lowest=16)
            for lever in _lever(f"--output-len {n}", replace(base, output_len=n), shape)
        ]
        yield from _first_that_reaches(shorter)


def _lever(option: str, opts: InitOptions, shape: Shape) -> list[Lever]:
    """The lever as a list: empty where the options give no study (the model does not fit,
    tensor parallel does not divide its heads) or no figure."""
    try:
        spec = shape(opts)
    except UserError:
        return []
    floor = lightest(spec)
    return [] if floor is None else [Lever(option, floor, spec)]


def _first_that_reaches(levers: list[Lever]) -> list[Lever]:
    """The mildest change that reaches the SLO, else the strongest tried."""
    reach = [x for x in levers if x.reaches]
    return reach[:1] or levers[-1:]


def _halvings(n: int, lowest: int = MIN_MODEL_LEN) -> list[int]:
    """The powers of two below `n` down to `lowest`, mildest first (35584: 32768, 16384, ...)."""
    found, power = [], 2 ** math.ceil(math.log2(n) - 1)
    while power >= lowest:
        found.append(power)
        power //= 2
    return found


def _one_at_a_time(spec: StudySpec) -> StudySpec:
    """`spec` with one request in flight at a time (the lightest load a rate gives), judged
    as one run at that load (scalar mode: no rate search)."""
    workload = spec.workload.model_copy(update={"request_rate": math.inf, "max_concurrency": 1})
    objective = spec.objective.model_copy(update={"mode": "scalar"})
    return spec.model_copy(update={"workload": workload, "objective": objective})


def _configs(spec: StudySpec) -> list[dict[str, Scalar]]:
    """vLLM's defaults and `DRAWN` configs of the search space (seeded)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    found = [dict(baseline_params(spec.search_space) or {})]
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    space = distributions(spec.search_space)
    found += [dict(study.ask(space).params) for _ in range(DRAWN)]
    return found


def _measured(spec: StudySpec, params: dict[str, Scalar]) -> dict[str, float]:
    """One simulated run of `params`; empty where the simulator refuses or fails it."""
    runner = length_only_runner(spec)
    runner.intervals = False  # only its figures are read: no bootstrap
    try:
        m = runner.measure(TrialContext(spec.name, 0, params, phase=lambda _: None))
    except UserError:
        return {}
    return dict(m.metrics or {}) if m.failure_kind is None else {}


def _ratio(limit: SloLimit, metrics: dict[str, float]) -> float:
    """How many times its limit a figure is (an upper limit's; 1 where met or unknown)."""
    value = metrics.get(limit.metric)
    if value is None or not limit.value:
        return math.inf if value is None else 1.0
    return max(value / limit.value, 1.0)


def _figure(spec: StudySpec, floor: Floor, limit: SloLimit) -> str:
    """`p99 TTFT 9492 ms (8100-12000)`: the figure with its band."""
    return held_words(floor.metrics, limit.metric, Bands.of([_one_at_a_time(spec).workload]))


def _lever_words(spec: StudySpec, lever: Lever) -> str:
    """`--gpu h200: p99 TTFT 2400 ms (1100-5300), meets` (each limit the study's floor broke,
    with its band)."""
    limits = [x for x in spec.slo_limits() if eases_at_lower_rates(x)]
    bands = Bands.of([_one_at_a_time(lever.spec).workload])
    said = ", ".join(
        held_words(lever.floor.metrics, x.metric, bands)
        for x in limits
        if x.metric in lever.floor.metrics
    )
    verdict = "meets" if lever.reaches else f"{lever.floor.distance:.1f}× the limit"
    w = lever.spec.workload
    cut = lever.option.startswith("--max-model-len") and w.dataset_name == "longdoc"
    what = f" (documents up to {max(w.longdoc_lengths)} tokens)" if cut else ""
    return f"{lever.option}{what}: {said}, {verdict}"

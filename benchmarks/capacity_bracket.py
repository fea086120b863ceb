"""The capacity search from a prediction against the search from the study's rate (issue 47,
SIMULATED).

The study: `tuner init --model deepseek-r1-distill-qwen-32b --gpu a6000 --count 4 --traffic
longdoc --tokenizer .cache/tiny-qwen2` (64 long documents, P99 TTFT <= 20 s, mean TPOT <= 80
ms, the default search: 8 rates, 4 repeats, 5 % resolution). The "engine" is the simulator
on the a6000 profile made `SPEED`x as fast (every constant alike, `tuner.sim.fit`): a box off
its profile by as much as the throughput band allows. For vLLM's defaults and `--configs - 1`
configs drawn at random from the search space (seed 0; configs vLLM's rules refuse are
drawn again), on that engine:

- old: the search from the study's rate (`capacity.start_rps` unset: workload.request_rate);
- new: the search from the bracket around the capacity the uncalibrated profile predicts
  (`tuner.fidelity.predict_skip.capacity_bracket`, the band of `tuner.fidelity.bands`).

Printed per config: both capacities with their intervals, runs, engine seconds, and whether
they agree (within 5 %, or the old capacity inside the new one's interval; "inside (0-?)":
an interval with no sure end, which holds anything).

`--race` (the owner's decision on issue 47, docs/objective.md "The race"): "new" is the
search as a night with early stopping runs it: vLLM's defaults searched whole within the
study's step budget (`capacity.max_steps`), then each config in turn races the incumbent
(the best capacity so far, `capacity_to_beat`'s `Beat`: its high end, else one resolution
above it) from its predicted bracket; a config that breaks there reads "below X" (capacity
0, interval (0, X)) and agrees when the old capacity is below X. "old" is the search before
issue 47: from the study's rate, no step budget, no race (`capacity.max_steps` unset).

    nice -n 5 .venv/bin/python benchmarks/capacity_bracket.py STUDY.yaml [--configs 10] [--race]
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import optuna

from tuner.fidelity.predict_skip import capacity_bracket
from tuner.measure.capacity import Beat
from tuner.measure.modes import CAPACITY_RPS
from tuner.run.cost import length_only_runner, slo_rule
from tuner.runners.trial_runner import TrialContext
from tuner.sim.fit import apply_factors, speed_factors
from tuner.spec.space import baseline_params, distributions, effective_flags, spec_rules
from tuner.spec.study import load_study_spec
from tuner.trial.payloads import SkipPrediction

SPEED = 1.1


def configs(spec, n: int) -> list[dict]:
    """vLLM's defaults, then random configs that vLLM's rules let start (`spec_rules`)."""
    space = distributions(spec.search_space)
    sampler = optuna.samplers.RandomSampler(seed=0)
    study = optuna.create_study(sampler=sampler)
    out = [dict(baseline_params(spec.search_space) or {})]
    while len(out) < n:
        trial = study.ask(space)
        study.tell(trial, 0.0)
        if spec_rules(spec, effective_flags(spec, trial.params)) is None:
            out.append(dict(trial.params))
    return out


def verdict(close: bool, bounded: bool, inside: bool, lost: bool = False) -> str:
    if close:
        return "within 5 %"
    if inside and lost:
        return "inside: below the race's rate"
    if inside:
        return "inside" if bounded else "inside (0-?)"
    return "DISAGREE"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("study")
    parser.add_argument("--configs", type=int, default=10)
    parser.add_argument("--race", action="store_true", help="new: the race, within the budget")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    spec = load_study_spec(args.study)
    old_spec = spec
    if args.race:  # the old search: no step budget
        search = spec.objective.search.model_copy(update={"max_steps": None})
        objective = spec.objective.model_copy(update={"capacity": search})
        old_spec = spec.model_copy(update={"objective": objective})
    stock = length_only_runner(spec)
    engine = length_only_runner(spec)
    old_engine = length_only_runner(old_spec)
    assert stock.gpu is not None
    engine.gpu = apply_factors(stock.gpu, speed_factors(SPEED))
    old_engine.gpu = engine.gpu
    incumbent = None  # (capacity, Beat) of the best so far (`--race`)
    agree, agree_bounded, old_s, new_s = 0, 0, 0.0, 0.0
    rows = configs(spec, args.configs)
    for i, params in enumerate(rows):
        ctx = TrialContext(spec.name, i, params, phase=lambda _: None)
        if args.race and spec.pruning.enabled:  # both searches' steps stop as a night's do
            ctx = replace(ctx, checkpoint=slo_rule(spec), check_every_s=spec.pruning.check_every_s)
        predicted = stock.measure(ctx).capacity
        pred = predicted.capacity_rps if predicted is not None else None
        forecast = SkipPrediction(metrics={CAPACITY_RPS: pred}) if pred else None
        bracket = capacity_bracket(spec, stock.objective, forecast)
        old = old_engine.measure(ctx) if args.race else engine.measure(ctx)
        beat = incumbent[1] if args.race and incumbent is not None else None
        new = engine.measure(replace(ctx, bracket=bracket, beat=beat))
        if args.race and new.capacity is not None and new.capacity.capacity_rps > 0:
            found = new.capacity
            if incumbent is None or found.capacity_rps > incumbent[0]:
                high = found.capacity_rps_high
                high = high if high is not None else found.above_rps
                incumbent = (found.capacity_rps, Beat(found.capacity_rps, 1.0, high))
        if old.capacity is None or new.capacity is None:
            print(f"config {i}: no capacity (old {old.failure_reason}, new {new.failure_reason})")
            continue
        o, n = old.capacity, new.capacity
        low = n.capacity_rps_low or 0.0  # a lost race: (0, the race's rate)
        inside = low <= o.capacity_rps <= (n.capacity_rps_high or float("inf"))
        lost = not n.capacity_rps and n.capacity_rps_high is not None  # "below X": a lost race
        bounded = inside and (low > 0 or lost) and n.capacity_rps_high is not None
        close = (  # both 0 (no rate met the SLOs) agree too
            abs(n.capacity_rps / o.capacity_rps - 1) <= 0.05
            if o.capacity_rps
            else not n.capacity_rps
        )
        agree += close or inside
        agree_bounded += close or bounded
        old_s, new_s = old_s + old.engine_s, new_s + new.engine_s
        print(
            f"config {i}: predicted {pred or 0:.4f}  old {o.capacity_rps:.4f} "
            f"({o.capacity_rps_low or 0:.4f}-{o.capacity_rps_high or 0:.4f}) {o.runs} runs "
            f"{old.engine_s:.0f} s | new {n.capacity_rps:.4f} ({low:.4f}-"
            f"{n.capacity_rps_high or 0:.4f}) {n.runs} runs {new.engine_s:.0f} s | "
            f"{verdict(close, bounded, inside, lost)}",
            flush=True,
        )
    print(
        f"agree: {agree} of {len(rows)} (within 5 %, or inside the new interval; "
        f"{agree_bounded} counting only a bounded interval); "
        f"engine time old {old_s:.0f} s, new {new_s:.0f} s "
        "(SIMULATED)"
    )


if __name__ == "__main__":
    main()

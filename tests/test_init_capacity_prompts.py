"""`tuner init --objective capacity` sizes the workload to the capacity search's ceiling: the
search never tries a rate above num_prompts / (4 × the tightest TTFT/E2EL limit)
(`tuner.measure.capacity.shown_rps`), so a study with few prompts was capped below what the
box serves and reported "capacity ≥ X (the highest rate allowed)". Now the prompts are enough
for 2× what vLLM's defaults sustain (SIMULATED); `--num-prompts` or `--rate` keep them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.measure.capacity import shown_rps
from tuner.run.cost import NightCost
from tuner.scaffold.options import InitOptions
from tuner.scaffold.rate import sustained_rate
from tuner.scaffold.study import CAPACITY_HEADROOM, CAPACITY_PROMPTS_MAX, Draft, draft_study
from tuner.spec.study import StudySpec
from tuner_testing.cli import REPO

TINY = str(REPO / ".cache" / "tiny-qwen2")
# 1× H200, an 8B model, chat traffic: vLLM's defaults sustain about 15 req/s (SIMULATED), and
# the 200 prompts of chat traffic under its 2 s P99 TTFT limit show at most 25 req/s
H200 = {"model": "deepseek-r1-0528-qwen3-8b", "gpu": "h200", "tokenizer": TINY, "trials": 2}


@pytest.fixture(autouse=True)
def no_night_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    """`tuner init`'s budget line left unestimated: this module's tests size the prompts and
    the rate, and the night's cost of a 1000-prompt capacity study (twelve configs racing, ~29 s
    of CPU, 88 % of a draft's) is the budget's, checked by test_preflight's longdoc night and
    test_night_cost. The trials are given (`H200`), so the draft needs no estimate."""

    def unestimated(spec: StudySpec, **_: object) -> NightCost:
        return NightCost(1, None, "not estimated in this test", spec.budget.timeout_s)

    monkeypatch.setattr("tuner.scaffold.study.night_cost", unestimated)


def _draft(tmp_path: Path, **given: object) -> Draft:
    opts = InitOptions(**{**H200, **given})  # type: ignore[arg-type]
    return draft_study(opts, tmp_path / "s.yaml", detect=lambda: None)


def _ceiling(spec: StudySpec) -> float:
    return shown_rps(spec.workload.num_prompts, spec.slo_limits())


@pytest.mark.slow  # two rate searches (SIMULATED): ~2.3 s, `make test` only
def test_capacity_prompts_reach_twice_what_the_defaults_sustain(tmp_path: Path) -> None:
    as_given = _draft(tmp_path, objective="capacity", num_prompts=200).spec  # chat's own 200
    scalar = as_given.objective.model_copy(update={"mode": "scalar"})
    sustained = sustained_rate(as_given.model_copy(update={"objective": scalar}))
    assert _ceiling(as_given) < CAPACITY_HEADROOM * sustained  # 25 req/s: the old study's cap
    sized = _draft(tmp_path, objective="capacity")
    n = sized.spec.workload.num_prompts
    assert 200 < n <= CAPACITY_PROMPTS_MAX
    assert _ceiling(sized.spec) >= CAPACITY_HEADROOM * sustained > _ceiling(as_given)
    line = next(x for x in sized.notes if x.startswith("workload: "))
    assert f"{n} prompts, not 200" in line and "SIMULATED" in line, line


@pytest.mark.parametrize(
    "given",
    [
        {"objective": "scalar"},  # no search, no ceiling
        {"objective": "capacity", "rate": 10.0},  # the rate given: no estimate to size to
    ],
)
def test_prompts_kept_when_scalar_or_the_rate_is_given(
    tmp_path: Path, given: dict[str, object]
) -> None:
    draft = _draft(tmp_path, **given)
    assert draft.spec.workload.num_prompts == 200
    assert not any(x.startswith("workload: ") for x in draft.notes)


def test_a_request_file_is_sent_as_it_is_not_repeated_to_the_ceiling(tmp_path: Path) -> None:
    """Issue 50 item 14: a 20-line file was repeated to 341 prompts, each request sent 17
    times: a prefix-cache-friendly load that is not the traffic."""
    lines = [
        f'{{"prompt": "question {i} about the document", "output_tokens": 64}}' for i in range(20)
    ]
    traffic = tmp_path / "mine.jsonl"
    traffic.write_text("\n".join(lines) + "\n")
    draft = _draft(tmp_path, objective="capacity", traffic=str(traffic))
    assert draft.spec.workload.num_prompts == 20
    line = next(x for x in draft.notes if x.startswith("workload: "))
    assert line.startswith("workload: the file's 20 requests, each sent once: capacity mode's ")
    assert "repeating its lines would send each request many times" in line


@pytest.mark.slow  # a 1000-prompt rate search (SIMULATED): ~2.5 s, its night cost left out
def test_a_ceiling_the_prompts_cannot_lift_is_said_and_the_search_starts_below_it(
    tmp_path: Path,
) -> None:
    """Issue 50 item 7: with an E2EL limit the 1000 prompts' ceiling (8.3 req/s) was below the
    study's own starting rate (15 req/s), and the note called it "2× what the defaults
    sustain"; every config then read "capacity ≥ 8.333 req/s"."""
    draft = _draft(tmp_path, objective="capacity", slo=["p99_e2el_ms<=30000"])
    spec = draft.spec
    assert spec.workload.num_prompts == CAPACITY_PROMPTS_MAX
    ceiling = _ceiling(spec)
    assert spec.workload.request_rate <= ceiling < 1.01 * spec.workload.request_rate
    line = next(x for x in draft.notes if x.startswith("workload: "))
    assert "can reach only 8.333 req/s" in line and "and tie" in line, line
    rate = next(x for x in draft.notes if x.startswith("traffic: "))
    assert "the rate search's ceiling with 1000 prompts; vLLM's defaults would start at" in rate

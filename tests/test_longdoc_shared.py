"""Long documents asked several times: prompts that share the document as a prefix, a shared
system prompt, burst or spread order; and the simulator's prefix cache seeing them in
`tuner plan`'s workload (block size then matters)."""

from __future__ import annotations

import pytest

from tuner.errors import UserError
from tuner.sim.planner import simulate
from tuner.spec.workload import WorkloadSpec
from tuner.workload.datasets import build_requests
from tuner.workload.longdoc import longdoc_prompts
from tuner.workload.tokenizer import load_tokenizer


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    return load_tokenizer(str(tiny_model_dir))


def _shared(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _spec(**kw) -> WorkloadSpec:
    base = {"dataset_name": "longdoc", "longdoc_lengths": [600, 1200], "num_prompts": 12}
    return WorkloadSpec(**{**base, **kw})


def test_one_question_per_document_is_the_dataset_as_before(tok) -> None:
    spec = _spec()
    assert not spec.longdoc_shared
    before = longdoc_prompts(tok, 12, lengths=[600, 1200], weights=None, seed=0)
    assert [r.prompt for r in build_requests(spec, tok)] == [text for text, _ in before]
    assert all(r.prompt_ids is None for r in build_requests(spec, tok))


def test_a_documents_questions_share_it_as_a_prefix_in_a_burst(tok) -> None:
    requests = build_requests(_spec(longdoc_questions=[4]), tok)
    assert len(requests) == 12
    for doc in range(3):
        group = requests[4 * doc : 4 * doc + 4]
        ids = [list(tok.encode(r.prompt, add_special_tokens=False)) for r in group]
        assert [r.prompt_ids for r in group] == [tuple(i) for i in ids]
        assert [r.prompt_len for r in group] == [len(i) for i in ids]
        target = max(r.prompt_len for r in group)
        assert target in (600, 1200) and all(target - 3 <= r.prompt_len for r in group)
        shared = min(_shared(ids[0], other) for other in ids[1:])
        assert shared >= target - 20  # all but the question
        assert len({r.prompt for r in group}) == 4  # four different questions
    first, second = requests[0].prompt_ids, requests[4].prompt_ids
    assert _shared(list(first), list(second)) < 40  # another document: the instruction only


def test_spread_order_and_a_shared_system_prompt(tok) -> None:
    burst = build_requests(_spec(longdoc_questions=[3], longdoc_system_len=64), tok)
    spread = build_requests(
        _spec(longdoc_questions=[3], longdoc_system_len=64, longdoc_order="spread"), tok
    )
    assert sorted(r.prompt for r in burst) == sorted(r.prompt for r in spread)
    assert [r.prompt for r in burst] != [r.prompt for r in spread]
    heads = {r.prompt_ids[:64] for r in burst}
    assert len(heads) == 1  # every request starts with the same 64 tokens


def test_bad_reuse_options_are_refused_in_one_line(tok) -> None:
    for bad in ([0], "x", [True], []):
        with pytest.raises(ValueError, match="questions"):
            _spec(longdoc_questions=bad)
    with pytest.raises(ValueError):
        _spec(longdoc_order="random")
    with pytest.raises(UserError, match="too short for a system prompt of 590"):
        build_requests(_spec(longdoc_system_len=590), tok)


def test_every_documented_number_of_questions_builds(tok) -> None:
    """Issue 33: a document drew its record numbers from 100-999, so 901 to 1000 questions
    (the documented limit) crashed the build after `check` passed; up to 900 questions a
    document's prompts are the ones they were."""
    for asked in (901, 1000):
        requests = build_requests(_spec(longdoc_questions=[asked], num_prompts=asked), tok)
        assert len(requests) == asked and len({r.prompt for r in requests}) == asked
        assert max(r.prompt_len for r in requests) <= 1200
    kept = build_requests(_spec(longdoc_questions=[4]), tok)
    assert "record 559?" in kept[0].prompt  # as drawn before the change (seed 0)


def test_with_repeated_documents_block_size_changes_the_predicted_ttft(tok) -> None:
    """Issue 23: with documents asked several times, hits depend on the block size, so the
    planner's P99 TTFT does; with each document asked once it does not."""
    from tuner.runners.plan import study_workload

    def p99_ttft_s(questions: list[int], block_size: int) -> float:
        w = _spec(
            longdoc_questions=questions,
            longdoc_lengths=[4000, 7000],
            num_prompts=40,
            request_rate=4.0,
        )
        reqs = build_requests(w, tok)

        class _Spec:  # what study_workload reads of a study spec
            workload = w

        work = study_workload(_Spec(), reqs, w)
        flags = {"tensor-parallel-size": 4, "max-model-len": 8192, "block-size": block_size}
        result = simulate(
            "deepseek-r1-distill-qwen-32b", "a6000", flags, list(work.prompt_lens),
            [8] * len(reqs), list(work.arrival_s), prompt_ids=work.prompt_id_lists(),
        )  # fmt: skip
        ttfts = sorted(r.ttft_s for r in result.records)
        return ttfts[int(0.99 * (len(ttfts) - 1))]

    assert p99_ttft_s([1], 16) == p99_ttft_s([1], 32)
    assert p99_ttft_s([4], 16) < 0.99 * p99_ttft_s([4], 32)

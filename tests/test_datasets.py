"""Workload building: exact random lengths, vLLM's ShareGPT rules, JSONL, determinism, errors."""

from __future__ import annotations

import json
import re

import pytest

from tuner.errors import UserError
from tuner.spec.workload import WorkloadSpec
from tuner.workload.datasets import build_requests, random_requests, resized
from tuner.workload.request import BenchRequest
from tuner.workload.tokenizer import load_tokenizer


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    return load_tokenizer(str(tiny_model_dir))


def _random(tok, **kw):
    return build_requests(WorkloadSpec(dataset_name="random", **kw), tok)


def test_random_prompts_have_exact_token_lengths(tok):
    reqs = _random(tok, num_prompts=50, random_input_len=200, random_output_len=20)
    assert all(r.prompt_len == 200 and r.output_len == 20 and r.ignore_eos for r in reqs)
    for r in reqs:
        assert len(tok.encode(r.prompt, add_special_tokens=False)) == 200
    assert len({r.prompt for r in reqs}) == 50


def test_random_range_ratio_bounds(tok):
    reqs = _random(
        tok, num_prompts=200, random_input_len=100, random_output_len=40, random_range_ratio=0.5
    )
    ins = [r.prompt_len for r in reqs]
    outs = [r.output_len for r in reqs]
    assert 50 <= min(ins) < max(ins) <= 150
    assert 20 <= min(outs) < max(outs) <= 60


def test_random_is_deterministic_per_seed(tok):
    a = _random(tok, num_prompts=20, random_input_len=64, random_range_ratio=0.3, seed=5)
    b = _random(tok, num_prompts=20, random_input_len=64, random_range_ratio=0.3, seed=5)
    c = _random(tok, num_prompts=20, random_input_len=64, random_range_ratio=0.3, seed=6)
    assert a == b
    assert a != c


def test_load_tokenizer_missing_dir(tmp_path):
    with pytest.raises(UserError, match="not found"):
        load_tokenizer(str(tmp_path / "nope"))
    with pytest.raises(UserError, match="cannot load"):
        load_tokenizer(str(tmp_path))  # exists, but holds no tokenizer


def _conv(human: str, gpt: str) -> dict:
    return {
        "id": "x",
        "conversations": [{"from": "human", "value": human}, {"from": "gpt", "value": gpt}],
    }


def _sharegpt_file(tmp_path, entries):
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(entries))
    return str(path)


def test_sharegpt_filters_like_vllm(tmp_path, tok):
    long_text = "the model " * 600  # > 1024 tokens
    entries = [
        _conv("What is the river near the old village called?", "It is the silver river."),
        _conv("hi", "A reply long enough to pass the filter."),  # prompt < 4 tokens
        _conv("Tell me about the quiet mountain garden please.", "Ok"),  # output < 4 tokens
        _conv(long_text, "fine answer with several words"),  # prompt > 1024
        {"id": "one-turn", "conversations": [{"from": "human", "value": "alone"}]},
    ]
    path = _sharegpt_file(tmp_path, entries)
    spec = WorkloadSpec(dataset_name="sharegpt", dataset_path=path, num_prompts=1)
    reqs = build_requests(spec, tok)
    assert [r.prompt for r in reqs] == [entries[0]["conversations"][0]["value"]]
    assert reqs[0].output_len == len(tok(entries[0]["conversations"][1]["value"]).input_ids)
    assert reqs[0].ignore_eos is False

    # A fixed output length skips the output minimum: "Ok" passes; 3 valid, oversampled to 5.
    spec = WorkloadSpec(
        dataset_name="sharegpt", dataset_path=path, num_prompts=5, sharegpt_output_len=64
    )
    reqs = build_requests(spec, tok)
    assert len(reqs) == 5 and {r.output_len for r in reqs} == {64}
    assert len({r.prompt for r in reqs}) == 2
    assert reqs == build_requests(spec, tok)


def test_sharegpt_order_depends_on_seed(tmp_path, tok):
    entries = [
        _conv(f"Question number {i} about the golden market?", "An answer of words.")
        for i in range(30)
    ]
    path = _sharegpt_file(tmp_path, entries)
    order = [
        [
            r.prompt
            for r in build_requests(
                WorkloadSpec(dataset_name="sharegpt", dataset_path=path, num_prompts=30, seed=s),
                tok,
            )
        ]
        for s in (0, 0, 1)
    ]
    assert order[0] == order[1] != order[2]
    assert sorted(order[0]) == sorted(order[2])


def test_sharegpt_bad_files(tmp_path, tok):
    spec = lambda p: WorkloadSpec(dataset_name="sharegpt", dataset_path=p, num_prompts=2)  # noqa: E731
    with pytest.raises(UserError, match="not found"):
        build_requests(spec(str(tmp_path / "missing.json")), tok)
    bad = tmp_path / "bad.json"
    bad.write_text('[\n {"conversations": [}\n]')
    with pytest.raises(UserError, match=r"bad\.json: line 2: malformed JSON"):
        build_requests(spec(str(bad)), tok)
    broken = _sharegpt_file(tmp_path, [{"conversations": [{"from": "human"}, {"value": "x"}]}])
    with pytest.raises(UserError, match="conversation 0"):
        build_requests(spec(broken), tok)


def _jsonl(tmp_path, lines):
    path = tmp_path / "w.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_jsonl_prompts_messages_and_output_len(tmp_path, tok):
    msgs = [{"role": "user", "content": "Read the letter and answer."}]
    path = _jsonl(
        tmp_path,
        [
            json.dumps({"prompt": "Summarise the paper about the river.", "output_len": 32}),
            "",
            json.dumps({"messages": msgs}),
        ],
    )
    chat = build_requests(
        WorkloadSpec(
            dataset_name="jsonl", dataset_path=path, num_prompts=5, endpoint="/v1/chat/completions"
        ),
        tok,
    )
    assert [r.output_len for r in chat] == [32, None, 32, None, 32]  # cycles in file order
    assert chat[0].prompt == "Summarise the paper about the river."
    assert chat[0].prompt_len == len(tok("Summarise the paper about the river.").input_ids)
    assert chat[1].prompt == msgs
    rendered = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    assert chat[1].prompt_len == len(tok(rendered, add_special_tokens=False).input_ids)
    completions = build_requests(
        WorkloadSpec(dataset_name="jsonl", dataset_path=path, num_prompts=2), tok
    )
    assert completions[1].prompt == rendered  # /v1/completions gets the templated text


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"prompt": "ok"', "w.jsonl:2: malformed JSON"),
        ("[1, 2]", "w.jsonl:2: each line must be a JSON object"),
        ('{"text": "no prompt"}', "w.jsonl:2: needs a string 'prompt'"),
        ('{"prompt": "x", "output_len": 0}', "w.jsonl:2: output_len must be a positive integer"),
        ('{"messages": [{"role": "user"}]}', "w.jsonl:2: needs a string 'prompt'"),
    ],
)
def test_jsonl_malformed_line_names_file_and_line(tmp_path, tok, line, message):
    path = _jsonl(tmp_path, ['{"prompt": "fine"}', line])
    with pytest.raises(UserError, match=message.replace(".", r"\.").replace("[", r"\[")):
        build_requests(WorkloadSpec(dataset_name="jsonl", dataset_path=path, num_prompts=1), tok)


def test_jsonl_empty_file(tmp_path, tok):
    path = _jsonl(tmp_path, [""])
    with pytest.raises(UserError, match="no requests"):
        build_requests(WorkloadSpec(dataset_name="jsonl", dataset_path=path, num_prompts=1), tok)


# ---- longdoc --------------------------------------------------------------------------------


def _longdoc(tok, **kw):
    return build_requests(WorkloadSpec(dataset_name="longdoc", **kw), tok)


def test_longdoc_prompts_have_exact_token_lengths_and_a_question(tok):
    lengths = [100, 300, 2048, 32768]
    reqs = _longdoc(tok, num_prompts=12, longdoc_lengths=lengths, longdoc_output_len=50, seed=2)
    assert {r.prompt_len for r in reqs} <= set(lengths)
    assert len({r.prompt_len for r in reqs}) > 1  # the mix is drawn, not one length
    for r in reqs:
        assert len(tok.encode(r.prompt, add_special_tokens=False)) == r.prompt_len
        assert r.output_len == 50 and r.ignore_eos
        key = r.prompt.split("code of record ", 1)[1].split("?", 1)[0]
        assert f"The code of record {key} is " in r.prompt  # the answer is in the document


def test_longdoc_defaults_follow_the_seed_case():
    spec = WorkloadSpec(dataset_name="longdoc")
    assert spec.longdoc_lengths == [512, 2048, 8192, 32768]
    assert spec.longdoc_output_len == 1024 and spec.longest_request == 32768 + 1024


def test_longdoc_is_deterministic_per_seed_and_differs_across_seeds(tok):
    kw = {"num_prompts": 10, "longdoc_lengths": "100,128,256"}
    a, b, c = _longdoc(tok, seed=5, **kw), _longdoc(tok, seed=5, **kw), _longdoc(tok, seed=6, **kw)
    assert a == b
    assert [r.prompt for r in a] != [r.prompt for r in c]
    assert len({r.prompt for r in a}) == 10


def test_longdoc_weights_choose_the_mix(tok):
    reqs = _longdoc(
        tok, num_prompts=40, longdoc_lengths="100,128", longdoc_weights="0.001,1", seed=1
    )
    lens = [r.prompt_len for r in reqs]
    assert lens.count(128) >= 35


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ({"longdoc_lengths": "512,abc"}, "'abc' is not a whole number"),
        ({"longdoc_lengths": "512,0"}, "'0' must be a whole number of tokens"),
        ({"longdoc_lengths": "-5"}, "'-5' must be"),
        ({"longdoc_lengths": "1.5"}, "'1.5' is not a whole number"),
        ({"longdoc_lengths": [512.0]}, "must be a whole number"),
        ({"longdoc_lengths": ""}, "give prompt lengths"),
        ({"longdoc_lengths": "100,128", "longdoc_weights": "1"}, "one per length"),
        ({"longdoc_lengths": "100,128", "longdoc_weights": "1,0"}, "must be > 0"),
        ({"longdoc_output_len": 0}, "greater than or equal to 1"),
    ],
)
def test_longdoc_bad_values_are_refused(fields, fragment):
    with pytest.raises(ValueError, match=re.escape(fragment)):
        WorkloadSpec(dataset_name="longdoc", **fields)


def test_longdoc_too_short_for_its_question_is_a_user_error(tok):
    with pytest.raises(UserError, match="longdoc length 20 is too short"):
        _longdoc(tok, num_prompts=2, longdoc_lengths=[512, 20])


@pytest.mark.parametrize("factor", [0.97, 1.03, 1.5])
def test_resized_prompts_have_the_scaled_exact_length(tok, factor):

    reqs = random_requests(tok, 8, input_len=200, output_len=8, range_ratio=0.5, seed=3)
    for r in reqs:
        out = resized(r, tok, factor)
        n = len(tok.encode(out.prompt, add_special_tokens=False))
        assert n == round(r.prompt_len * factor) == out.prompt_len
        assert out.output_len == r.output_len and out.ignore_eos == r.ignore_eos
    chat = BenchRequest([{"role": "user", "content": reqs[0].prompt}], reqs[0].prompt_len, 8)
    assert resized(chat, tok, 0.5).prompt[0]["content"] == resized(reqs[0], tok, 0.5).prompt

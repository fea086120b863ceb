"""`tuner verify` against an engine without `/server_info` (issue 49, item 4): its /metrics
bound `--max-num-batched-tokens` (a step of more tokens in `vllm:iteration_tokens_total`) and
`--max-num-seqs` (`vllm:num_requests_running`, read while the workload runs); an export below
a bound names the flag and exits 3. In process: the page is vLLM 0.32's text format."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tuner.verify import compare
from tuner.verify.changes import flag_changes, flag_lines
from tuner.verify.engine_info import (
    MetricsWatch,
    budget_at_most,
    inferred_bounds,
    least_cached,
    requests_running,
    step_tokens_above,
    step_tokens_at_most,
)


def _page(buckets: dict[str, float], running: float) -> str:
    """A /metrics page as vLLM writes it: one engine, cumulative buckets."""
    rows = [
        f'vllm:iteration_tokens_total_bucket{{engine="0",le="{le}",model_name="m"}} {n}'
        for le, n in buckets.items()
    ]
    return "\n".join(
        [
            "# TYPE vllm:iteration_tokens_total histogram",
            *rows,
            f'vllm:iteration_tokens_total_count{{engine="0",model_name="m"}} {buckets["+Inf"]}',
            "# TYPE vllm:num_requests_running gauge",
            f'vllm:num_requests_running{{engine="0",model_name="m"}} {running}',
        ]
    )


# 12 steps: 10 of at most 1024 tokens, 2 of 2049 to 4096
PAGE = _page({"1.0": 3, "1024.0": 10, "2048.0": 10, "4096.0": 12, "+Inf": 12}, 7)


def test_bounds_read_from_the_metrics_page() -> None:
    assert step_tokens_above(PAGE) == 2048 and requests_running(PAGE) == 7
    assert step_tokens_above(_page({"1.0": 0, "+Inf": 0}, 0)) is None  # no step yet
    assert step_tokens_above("") is None and requests_running("") is None
    bounds = inferred_bounds(2048, 7)
    assert [(b.flag, b.at_least) for b in bounds] == [
        ("max-num-batched-tokens", 2049),
        ("max-num-seqs", 7),
    ]


def test_an_export_below_a_bound_names_the_flag_and_exits_3() -> None:
    exported = {"max-num-batched-tokens": 1024, "max-num-seqs": 64, "block-size": 16}
    engine = {"block-size": "16"}  # from vllm:cache_config_info; the scheduler's flags hidden
    inferred = compare.inferred_checks(exported, engine, inferred_bounds(2048, 7))
    flags = compare.flag_checks(exported, engine)
    changes = flag_changes(flags, inferred)
    assert changes == ["--max-num-batched-tokens ≥ 2049 inferred from /metrics (exported 1024)"]
    lines = flag_lines(flags, inferred)
    assert (
        "flag --max-num-batched-tokens: inferred ≥ 2049 from /metrics (a step of more than 2048 "
        "tokens ran (vllm:iteration_tokens_total)), exported 1024: CONTRADICTS the export" in lines
    )
    assert any(
        x.startswith("flag --max-num-seqs: inferred ≥ 7") and "consistent" in x for x in lines
    )
    assert not any("does not expose" in x for x in lines)  # both bounded, neither unchecked
    found = compare.verdict([], [], {"completed": 10.0}, changes)
    assert (found.kind, found.exit_code) == ("changed", 3)
    assert "--max-num-batched-tokens ≥ 2049" in found.text


def test_a_budget_below_the_export_is_bounded_from_above() -> None:
    """No step past 4096 tokens though a prompt of 8000 was prefilled (at most 1000 of it
    cached): the budget is at most 4096, and an export of 8192 cannot be what runs."""
    assert step_tokens_at_most(PAGE) == 4096  # every one of the 12 steps is in le=4096
    assert step_tokens_at_most(_page({"1.0": 0, "+Inf": 0}, 0)) is None  # no step yet
    assert step_tokens_at_most(_page({"16384.0": 3, "+Inf": 4}, 0)) is None  # one past the edges
    assert budget_at_most(4096, 4000, 0) is None  # the prompt fits a step: nothing follows
    assert budget_at_most(4096, 8000, 5000) is None  # the cache may have held most of it
    bound = budget_at_most(4096, 8000, 1000)
    assert bound is not None and (bound.at_least, bound.at_most) == (None, 4096)
    exported = {"max-num-batched-tokens": 8192}
    inferred = compare.inferred_checks(exported, {}, inferred_bounds(2048, None, bound))
    assert [c.contradicts for c in inferred] == [True, False]  # ≤ 4096 excludes it; ≥ 2049 not
    assert flag_changes([], inferred) == [
        "--max-num-batched-tokens ≤ 4096 inferred from /metrics (exported 8192)"
    ]
    assert inferred[0].as_json()["at_most"] == 4096


def test_the_runs_cache_hits_are_shared_among_its_prompts() -> None:
    """The walk of issue 49/50: `tuner sim serve --max-num-batched-tokens 256` under an export
    of 8192, 40 chat prompts of 551 tokens, each with the chat template's 16 tokens cached.
    Charged to one prompt, the run's 640 hits left 551 − 640 < 256: no bound, "consistent",
    exit 0. Shared among the 40 (one of them had at most 16 cached), the budget is ≤ 256."""
    prompts = [551] * 40
    assert least_cached(prompts, 640.0) == (551, 16.0, 40)
    assert least_cached([], 7.0) == (0, 7.0, 1)
    assert least_cached([8000, 100], 1000.0) == (8000, 1000.0, 1)  # one long prompt: itself
    assert budget_at_most(256, 551, 640.0) is None  # the run's hits on one prompt: before
    bound = budget_at_most(256, *least_cached(prompts, 640.0))
    assert bound is not None and bound.at_most == 256
    assert bound.evidence.endswith(
        "though 40 prompts of at least 551 tokens were prefilled, one of them with at most 16 "
        "cached (the run's 640 cache hits among them)"
    )
    exported = {"max-num-batched-tokens": 8192}
    (check,) = compare.inferred_checks(exported, {}, inferred_bounds(None, None, bound))
    assert check.contradicts


READS: list[int] = []  # the /metrics reads the fake engine served


@pytest.fixture
def engine_url() -> Iterator[str]:
    """A /metrics endpoint whose running count goes 3, 9, then stays 2."""
    pages = iter([_page({"+Inf": 0}, 3), _page({"+Inf": 0}, 9)])
    READS.clear()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = next(pages, PAGE.replace("} 7", "} 2")).encode()
            READS.append(1)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None: ...

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_watch_keeps_the_most_requests_running(engine_url: str) -> None:
    with MetricsWatch(engine_url, None) as watch:
        for _ in range(100):  # the third read (10 s at most)
            if len(READS) >= 3:
                break
            threading.Event().wait(0.1)
    assert len(READS) >= 4  # and one more at the end
    assert [(b.flag, b.at_least) for b in watch.bounds()] == [
        ("max-num-batched-tokens", 2049),  # the last read's histogram
        ("max-num-seqs", 9),  # the most seen, not the last
    ]

"""vLLM's API server in front of the simulated engine: one process, one thread of work.

Two kinds of work share that thread (`--api-server-count 1`, the default):

- **admitting** a request (the handler, the chat template, `AsyncLLM.add_request` and
  `_add_request` in `vllm/v1/engine/async_llm.py`, the ZMQ send to the engine core), one
  request at a time, in order, `request_overhead_s` each;
- **streaming** what each engine step produced (`AsyncLLM`'s `output_handler` task:
  `OutputProcessor.process_outputs` detokenises every request's new token, then each
  request's SSE chunk is built and written), `stream_chunk_s` per request per step.

The streaming comes first: the output handler runs as soon as a step's outputs arrive, and a
burst's admissions take the thread's time that streaming leaves (a preemptive priority: the
event loop runs many short callbacks, so neither waits for the other to finish a request;
the output handler yields between slices of `VLLM_V1_OUTPUT_PROC_CHUNK_SIZE` outputs).
So a burst reaches the engine at 1 / `request_overhead_s` per second while few requests
stream, and slower as more do; and when streaming takes the whole thread (hundreds of
requests on a small model), the client receives tokens at the pace the server writes them,
not the engine's. With `stream_chunk_s` 0 the model is the one before issue 45's third source
(`front_end`, below: the admissions alone). The rest of the front end's work runs beside this
thread (`frontend_latency_s`: tokenising off the event loop, the ZMQ hops): a latency every
request pays and none queues for. All three are host constants (docs/simulator.md, "The API
server's front end").
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from typing import NamedTuple

import numpy as np

from tuner.sim.profiles import StepTimeConstants

# an admission this close to done when a gap ends is done in it (no second gap for rounding)
_EPSILON_S = 1e-12


def front_end(sent_s: float, free_s: float, c: StepTimeConstants) -> tuple[float, float]:
    """A request through vLLM's API server when nothing else holds its thread: (when the
    server is free for the next request, when this one reaches the engine core's queue).

    The admitting share of the work is done one request at a time, `request_overhead_s`
    each, in order: a burst reaches the engine at 1 / request_overhead_s per second. Then
    `frontend_latency_s`, which no request queues for."""
    free = max(sent_s, free_s) + c.request_overhead_s
    return free, free + c.frontend_latency_s


class Admitted(NamedTuple):
    request: int  # the client's index of the request
    at_engine_s: float  # when it reaches the engine core's queue


class ApiThread:
    """The API server's one thread in virtual time: admissions and streaming (module doc).

    Streaming comes first, so its schedule depends on the engine's steps alone: each step's
    chunks are written from the later of its end and the previous step's writes' end
    (Lindley's recursion), and those spans are kept. An admission takes the thread's idle time
    between them, from the later of when it was sent and when the one before it ended. A span
    is known once its step is simulated, and a step's writing starts at its end, so an
    admission that ends by a time the engine has reached is final; one still in progress
    keeps the idle time it has had and resumes.

    Contract, for a driver that moves time forward: `submit` each request once it is sent,
    in the order sent; call `stream` with each engine step's end time (in the order the steps
    are simulated) and the number of requests it gave a token to, and use the returned times
    as the client's; `admit(now)` returns the requests whose admission ended by `now`, given
    the steps simulated so far (every step that ends by `now`); `next_admission_s()` is when
    the next one ends if no more streaming arrives before it. A driver that advances the
    engine no further than `next_event_s()` before asking again sees the thread's schedule
    exactly.
    """

    def __init__(self, constants: StepTimeConstants) -> None:
        self.constants = constants
        self.admit_s = constants.request_overhead_s
        self.chunk_s = constants.stream_chunk_s
        self.latency_s = constants.frontend_latency_s
        self.streamed_until_s = 0.0  # when the thread has written every chunk so far
        self._pending: deque[tuple[int, float]] = deque()  # (request, sent), not yet admitted
        self._left_s = self.admit_s  # the first pending admission's work still to do
        self._cursor_s = 0.0  # time up to which the admissions have had the thread's idle time
        self._done: list[Admitted] = []
        # the streaming's busy spans, disjoint and in order; those before `_first` are past
        self._span_starts: list[float] = []
        self._span_ends: list[float] = []
        self._first = 0

    @property
    def busy(self) -> bool:
        """Requests are waiting to be admitted."""
        return bool(self._pending) or bool(self._done)

    def submit(self, request: int, sent_s: float) -> None:
        self._pending.append((request, sent_s))

    def next_admission_s(self) -> float:
        """When the first pending admission ends if no streaming arrives before then."""
        if not self._pending:
            return np.inf
        start = max(self._cursor_s, self._pending[0][1])
        return self._work(start, self._left_s, np.inf)[0]

    def next_event_s(self, next_sent_s: float) -> float:
        """When a driver must next look, given when the next request is sent: at that send
        and at the next admission's end; with streaming at no cost, only when the next
        request reaches the engine (its admission then depends on nothing else)."""
        if self.chunk_s:
            return min(next_sent_s, self.next_admission_s())
        if self._pending:
            return self.next_admission_s() + self.latency_s
        return front_end(next_sent_s, self._cursor_s, self.constants)[1]

    def admit(self, now_s: float) -> list[Admitted]:
        """The requests whose admission ended by `now_s`, each with its time at the engine."""
        self._serve(now_s)
        done, self._done = self._done, []
        return done

    def stream(self, ends_s: np.ndarray, requests: int) -> np.ndarray:
        """When the client receives the tokens of steps ending at `ends_s` (ascending), each
        step giving `requests` requests a token: after the thread has written them."""
        if not self.chunk_s:
            return ends_s
        work = self.chunk_s * requests
        # Lindley's recursion, in closed form: free_k = max(free_{k-1}, end_k) + work
        step = np.arange(len(ends_s), dtype=np.float64)
        latest = np.maximum.accumulate(ends_s - step * work)
        out = np.maximum(latest, self.streamed_until_s) + (step + 1.0) * work
        self.streamed_until_s = float(out[-1])
        self._keep_spans(out - work, out)
        return out

    def _keep_spans(self, starts: np.ndarray, ends: np.ndarray) -> None:
        """Add the writing's spans (ascending, each starting after the previous ends),
        merging those that touch."""
        if self._span_ends and starts[0] <= self._span_ends[-1] + _EPSILON_S:
            starts = starts.copy()
            starts[0] = self._span_starts.pop()
            self._span_ends.pop()
            self._first = min(self._first, len(self._span_ends))  # the merged span is live
        gaps = np.flatnonzero(starts[1:] > ends[:-1] + _EPSILON_S) + 1
        self._span_starts += starts[np.concatenate(([0], gaps))].tolist()
        self._span_ends += ends[np.concatenate((gaps - 1, [len(ends) - 1]))].tolist()

    def _work(self, start_s: float, work_s: float, until_s: float) -> tuple[float, float]:
        """`work_s` of admitting from `start_s` in the idle time the spans leave, stopping
        at `until_s`: (when it stopped, the work left: 0 if done)."""
        t, left = start_s, work_s
        starts, ends = self._span_starts, self._span_ends
        i = bisect_right(ends, t, self._first)
        while True:
            if i < len(starts) and starts[i] <= t:  # in a span: wait for its end
                t = ends[i]
                i += 1
                if t >= until_s:
                    return until_s, left
                continue
            gap_end = min(starts[i] if i < len(starts) else np.inf, until_s)
            if t + left <= gap_end + _EPSILON_S:
                return t + left, 0.0
            left -= gap_end - t
            if gap_end >= until_s:
                return until_s, left
            t = ends[i]
            i += 1

    def _serve(self, until_s: float) -> None:
        """Give the pending admissions the thread's idle time up to `until_s`."""
        while self._pending:
            request, sent = self._pending[0]
            start = max(self._cursor_s, sent)
            end, left = self._work(start, self._left_s, until_s)
            if left:
                if start < until_s:
                    self._left_s, self._cursor_s = left, until_s
                break
            self._pending.popleft()
            self._done.append(Admitted(request, end + self.latency_s))
            self._cursor_s, self._left_s = end, self.admit_s
        self._forget()

    def _forget(self) -> None:
        """Pass the spans that end before the cursor (no admission starts before it), and
        drop them now and then."""
        self._first = bisect_right(self._span_ends, self._cursor_s, self._first)
        if self._first > 256 and self._first * 2 > len(self._span_ends):
            del self._span_starts[: self._first], self._span_ends[: self._first]
            self._first = 0

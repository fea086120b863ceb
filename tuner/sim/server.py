"""`tuner sim serve`: an OpenAI-compatible HTTP server around the simulated engine.

It behaves like `vllm serve` from the outside: tokens stream over SSE at the times the
simulation gives, and /metrics carries vLLM's metric names (its start, where refused configs
exit 1 with vLLM's message and the port opens only after the simulated model load:
`tuner.sim.startup`). One asyncio task drives the engine in real time; each request handler
waits on its own queue.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from functools import partial

import numpy as np
from aiohttp import web

from tuner import __version__
from tuner.sim.faults import FaultPlan, FaultState
from tuner.sim.frontend import ApiThread
from tuner.sim.openai_shapes import Chunks, sse, usage_of
from tuner.sim.profiles import GpuProfile, ModelProfile
from tuner.sim.replicas import Replicas
from tuner.sim.server_info import cache_config_info, server_info, step_tokens_histogram
from tuner.sim.text import TokenText
from tuner.spec.values import Flags


@dataclass(slots=True)
class ServeOptions:
    model: ModelProfile
    gpu: GpuProfile
    flags: Flags
    model_path: str
    served_model_names: list[str]
    text: TokenText = field(default_factory=TokenText)
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    load_delay_s: float = 0.0
    faults: FaultPlan = field(default_factory=FaultPlan)
    time_scale: float = 1.0  # simulated seconds per wall second while serving


class SimServer:
    """Routes and the real-time engine loops: one per data-parallel replica, each request
    routed by vLLM's balancer (`tuner.sim.replicas`)."""

    def __init__(self, engine: Replicas, opts: ServeOptions) -> None:
        self.engine = engine
        self.opts = opts
        self.faults = FaultState(opts.faults)
        # per request: (its last token?, the loop time the API server has written it)
        self.streams: dict[str, asyncio.Queue[tuple[bool, float]]] = {}
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.finished_total = 0
        n = len(engine.engines)
        self._wake = [asyncio.Event() for _ in range(n)]
        # per replica: (now, id, prompt tokens, max tokens, prompt token ids or None)
        self._arrivals: list[deque[tuple[float, str, int, int, list[int] | None]]]
        self._arrivals = [deque() for _ in range(n)]
        self._t0 = 0.0
        self.scale = opts.time_scale
        # vLLM's API server's one thread, on the engine's clock (`tuner.sim.frontend`, the
        # planner's too): the requests it is admitting, and a wake-up for a new one
        self._api = ApiThread(engine.gpu.constants)
        self._keys = itertools.count()
        self._admitting: dict[int, asyncio.Future[None]] = {}
        self._submitted = asyncio.Event()

    async def _through_front_end(self) -> None:
        """Wait until this request reaches the engine: admitted by the API server's thread
        (one at a time, in order, in the time streaming leaves), then its latency."""
        key = next(self._keys)
        reached = self._admitting[key] = asyncio.get_running_loop().create_future()
        self._api.submit(key, self._now())
        self._submitted.set()
        try:
            await reached
        finally:
            self._admitting.pop(key, None)

    async def _run_front_end(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            for key, at_engine in self._api.admit(self._now()):
                reached = self._admitting.get(key)
                if reached is not None:  # None: its client went away
                    loop.call_at(self._loop_time(at_engine), _resolve, reached)
            due = self._api.next_admission_s()
            self._submitted.clear()
            if math.isinf(due):
                await self._submitted.wait()
                continue
            # a new request never ends an admission sooner; streaming only makes it later
            await asyncio.sleep(max(0.0, self._loop_time(due) - loop.time()))

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_get("/health", self.health)
        app.router.add_get("/version", self.version)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/completions", partial(self._generate, chat=False))
        app.router.add_post("/v1/chat/completions", partial(self._generate, chat=True))
        if dev_mode():  # vLLM offers its cache resets only in dev mode (serve/dev/)
            app.router.add_post("/reset_prefix_cache", self.reset_prefix_cache)
            app.router.add_get("/server_info", self.server_info)
        app.on_startup.append(self._start_engine)
        return app

    async def _start_engine(self, app: web.Application) -> None:
        self._t0 = asyncio.get_running_loop().time()
        app["engine_tasks"] = [
            asyncio.create_task(self._run_engine(i)) for i in range(len(self._arrivals))
        ] + [asyncio.create_task(self._run_front_end())]

    async def _run_engine(self, replica: int) -> None:
        loop = asyncio.get_running_loop()
        engine, wake = self.engine.engines[replica], self._wake[replica]
        while True:
            await wake.wait()
            wake.clear()
            while not self.faults.hung:
                self._admit(replica)
                if not engine.has_work:
                    break
                # on the engine's own clock: a late wake-up delays this step's tokens, not
                # the steps after it (the sleep below is shorter until the clock is due)
                duration, emitted, finished = engine.advance()
                if not duration:
                    break
                await asyncio.sleep(max(0.0, self._t0 + engine.clock / self.scale - loop.time()))
                done = {r.id for r in finished}
                self.engine.finished(list(done))
                self.generation_tokens_total += len(emitted)
                self.finished_total += len(done)
                written = self._api.stream(np.array([engine.clock]), len(emitted))
                due = self._loop_time(float(written[0]))
                for req in emitted:
                    queue = self.streams.get(req.id)
                    if queue is not None:
                        queue.put_nowait((req.id in done, due))
                self.faults.after_step()

    def _admit(self, replica: int) -> None:
        """Hand a replica's engine the requests that arrived by its clock, as `tuner plan`
        does (a request joins the first step that starts after it arrived); an idle engine
        takes the next one, its clock jumping to that arrival."""
        arrivals, engine = self._arrivals[replica], self.engine.engines[replica]
        while arrivals and (arrivals[0][0] <= engine.clock or not engine.has_work):
            now, rid, prompt_len, max_tokens, prompt_ids = arrivals.popleft()
            engine.add_request(rid, prompt_len, max_tokens, now, prompt_ids)

    # ---- plain endpoints -------------------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def version(self, request: web.Request) -> web.Response:
        # vLLM answers {"version"} alone; the devices let tests check that GPU slots never
        # overlap (a simulated engine has no GPU to claim); a time scale other than 1 tells the
        # tuner's client to pace and time its requests on the same scale.
        devices = os.environ.get("CUDA_VISIBLE_DEVICES")
        info: dict[str, str | float | None] = {
            "version": f"sim-{__version__}",
            "cuda_visible_devices": devices,
        }
        if self.scale != 1.0:
            info["time_scale"] = self.scale
        return web.json_response(info)

    async def models(self, request: web.Request) -> web.Response:
        if denied := self._unauthorized(request):
            return denied
        created = int(time.time())
        data = [
            {
                "id": name,
                "object": "model",
                "created": created,
                "owned_by": "vllm",
                "root": self.opts.model_path,
                "parent": None,
                "max_model_len": self.engine.config.max_model_len,
            }
            for name in self.opts.served_model_names
        ]
        return web.json_response({"object": "list", "data": data})

    async def server_info(self, request: web.Request) -> web.Response:
        """vLLM's dev-mode `GET /server_info` (`tuner.sim.server_info`)."""
        if denied := self._unauthorized(request):
            return denied
        info = server_info(self.engine.config, self.engine.gpu, self.opts.model_path)
        return web.json_response(info)

    async def reset_prefix_cache(self, request: web.Request) -> web.Response:
        """vLLM's dev-mode `POST /reset_prefix_cache`: `{"success": bool}`, false while a
        request holds blocks (vllm/entrypoints/serve/dev/cache/api_router.py)."""
        if denied := self._unauthorized(request):
            return denied
        idle = not any(self._arrivals)  # a request on its way to an engine holds blocks soon
        return web.json_response({"success": idle and self.engine.reset_prefix_cache()})

    async def metrics(self, request: web.Request) -> web.Response:
        """vLLM's names; the engine gauges once per data-parallel rank (`engine="i"`)."""
        name0 = self.opts.served_model_names[0]
        ranks = [
            (f'{{engine="{i}",model_name="{name0}"}}', e) for i, e in enumerate(self.engine.engines)
        ]
        served = ranks[:1]  # the API server's counters
        rows: list[tuple[str, str, str, list[tuple[str, float]]]] = [
            ("num_requests_running", "gauge", "Number of requests in model execution batches.",
             [(lab, e.num_running) for lab, e in ranks]),
            ("num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
             [(lab, e.num_waiting) for lab, e in ranks]),
            ("kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
             [(lab, e.kv_cache_usage) for lab, e in ranks]),
            ("num_preemptions_total", "counter", "Cumulative number of preemption from the "
             "engine.", [(lab, e.num_preemptions) for lab, e in ranks]),
            ("prompt_tokens_total", "counter", "Number of prefill tokens processed.",
             [(lab, self.prompt_tokens_total) for lab, _ in served]),
            ("generation_tokens_total", "counter", "Number of generation tokens processed.",
             [(lab, self.generation_tokens_total) for lab, _ in served]),
            ("request_success_total", "counter", "Count of successfully processed requests.",
             [(lab, self.finished_total) for lab, _ in served]),
            ("prefix_cache_queries_total", "counter", "Prefix cache queries, in terms of "
             "number of queried tokens.", [(lab, e.prefix_cache_tokens[0]) for lab, e in ranks]),
            ("prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of "
             "cached tokens.", [(lab, e.prefix_cache_tokens[1]) for lab, e in ranks]),
        ]  # fmt: skip
        lines = []
        for name, kind, help_text, series in rows:
            lines += [f"# HELP vllm:{name} {help_text}", f"# TYPE vllm:{name} {kind}"]
            lines += [f"vllm:{name}{labels} {float(value)}" for labels, value in series]
        lines += step_tokens_histogram(
            [
                (f'engine="{i}",model_name="{name0}"', e.step_token_counts, e.step_tokens_total)
                for i, e in enumerate(self.engine.engines)
            ]
        )
        lines += cache_config_info(self.engine.config, len(ranks))
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    # ---- generation ------------------------------------------------------------------------

    async def _generate(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        if denied := self._unauthorized(request):
            return denied
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise ValueError("the request body must be a JSON object")
            model = body.get("model") or self.opts.served_model_names[0]
            if model not in self.opts.served_model_names:
                return _error(404, f"The model `{model}` does not exist.", "NotFoundError")
            text = self.opts.text
            if chat:
                prompt_len, prompt_ids = text.chat_tokens(body.get("messages") or [])
                limit = body.get("max_completion_tokens") or body.get("max_tokens")
            else:
                prompt_len, prompt_ids = text.prompt_tokens(body.get("prompt", ""))
                limit = body.get("max_tokens", 16)
            max_tokens = int(limit) if limit else self.engine.config.max_model_len - prompt_len
            if limit is not None and max_tokens < 1:
                raise ValueError(f"max_tokens must be at least 1, got {limit}.")
        except (ValueError, TypeError) as exc:
            return _error(400, str(exc))
        if message := self.engine.request_error(prompt_len, max_tokens):
            return _error(400, message)
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        queue: asyncio.Queue[tuple[bool, float]] = asyncio.Queue()
        self.streams[rid] = queue
        await self._through_front_end()
        replica = self.engine.route([len(a) for a in self._arrivals])
        self.engine.owner[rid] = replica
        self._arrivals[replica].append((self._now(), rid, prompt_len, max_tokens, prompt_ids))
        self.prompt_tokens_total += prompt_len
        self.faults.request_started()
        self._wake[replica].set()
        chunks = Chunks(rid, model, chat)
        finished = False
        try:
            if body.get("stream"):
                usage = (body.get("stream_options") or {}).get("include_usage", False)
                usage = usage and not self.opts.faults.no_usage
                return await self._stream(request, queue, chunks, prompt_len, usage)
            count = 0
            while not finished:
                finished = await _written(queue)
                count += 1
            out = "".join(text.token(i) for i in range(count))
            return web.json_response(chunks.full(out, usage_of(prompt_len, count)))
        finally:
            self.streams.pop(rid, None)
            self.engine.abort_request(rid)  # a no-op once the request finished
            for i, queue_i in enumerate(self._arrivals):  # gone before its engine took it
                if any(a[1] == rid for a in queue_i):
                    self._arrivals[i] = deque(a for a in queue_i if a[1] != rid)

    async def _stream(
        self,
        request: web.Request,
        queue: asyncio.Queue[tuple[bool, float]],
        chunks: Chunks,
        prompt_len: int,
        usage: bool,
    ) -> web.StreamResponse:
        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await resp.prepare(request)
        count = 0
        finished = False
        try:
            while not finished:
                finished = await _written(queue)
                parts = []
                if count == 0 and chunks.chat:
                    parts.append(chunks.role())
                parts.append(chunks.token(self.opts.text.token(count), finished))
                count += 1
                await resp.write(b"".join(sse(p) for p in parts))
            if usage:
                await resp.write(sse(chunks.usage(usage_of(prompt_len, count))))
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
        except ConnectionError:  # the client went away; the caller aborts the request
            pass
        return resp

    def _now(self) -> float:
        """Seconds on the engine's (simulated) clock since the server started."""
        return (asyncio.get_running_loop().time() - self._t0) * self.scale

    def _loop_time(self, clock_s: float) -> float:
        """The event loop's time when the engine's clock reads `clock_s`."""
        return self._t0 + clock_s / self.scale

    def _unauthorized(self, request: web.Request) -> web.Response | None:
        key = self.opts.api_key
        if key and request.headers.get("Authorization") != f"Bearer {key}":
            return web.json_response({"error": "Unauthorized"}, status=401)
        return None


async def _written(queue: asyncio.Queue[tuple[bool, float]]) -> bool:
    """The next token of a request, once the API server has written it: its last?"""
    finished, due = await queue.get()
    wait = due - asyncio.get_running_loop().time()
    if wait > 0:
        await asyncio.sleep(wait)
    return finished


def _resolve(reached: asyncio.Future[None]) -> None:
    if not reached.done():
        reached.set_result(None)


def dev_mode() -> bool:
    """vLLM's `VLLM_SERVER_DEV_MODE` (vllm/envs.py: an integer, "1" on)."""
    try:
        return bool(int(os.environ.get("VLLM_SERVER_DEV_MODE", "0")))
    except ValueError:
        return False


def _error(status: int, message: str, kind: str = "BadRequestError") -> web.Response:
    info = {"message": message, "type": kind, "param": None, "code": status}
    return web.json_response({"error": info}, status=status)

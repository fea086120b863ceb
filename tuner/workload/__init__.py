"""The workload: which requests, when, and the streaming client that times them like vLLM.

`WorkloadSpec` (from `tuner.spec.workload`) → requests (`datasets`: random, sharegpt, jsonl,
longdoc; exact token lengths) → arrival times (`schedule`) → the client streams each one
(`client`, `sse`) → one `RequestRecord` per request → `benchmark` computes the metrics.

Modules:
- `benchmark`: `run_benchmark`, one workload against a running server (warm-up, pacing, the
  stall watchdog, early-stopping checkpoints), the code path of `tuner bench` and every trial;
- `client`: one streamed request in, one `RequestRecord` out (httpx on aiohttp's transport);
- `loop`: the client's event loop, the run's stop signals taken between its callbacks;
- `probe`: what a server says about itself before a run: its time scale, its model cards, and
  so which model to request;
- `sse`: Server-Sent Events decoding (pure: bytes in, events out);
- `request`: the requests as values: `BenchRequest` (one), `Workload` (a runner's, never swapped);
- `datasets`: `build_requests` (same seed, same requests), from vLLM's datasets or ours;
- `longdoc`, `exact`: the built-in long-document dataset; prompts of an exact token length;
- `schedule`: arrival times drawn as `vllm bench serve` draws them;
- `engine_metrics`: the engine's Prometheus gauges, early stopping's evidence;
- `cold`: every run measured cold (warm-up prompts outside the measured set, vLLM's dev-mode
  prefix-cache reset, the hit rate a prompt set implies);
- `tokenizer`: a local Hugging Face tokenizer, never from the network (and the simulated
  server's, picked as `vllm serve` picks it);
- `lengths`: the token lengths of a workload's requests without its tokenizer (the simulator's),
  and the one refusal of requests longer than max-model-len.

What may be assumed: one run builds its workload once, before its first trial, and never
changes it; the client records what it saw and never judges it (scoring is `tuner.measure`'s).

Re-exported here: the pure and numpy-only names. `run_benchmark`, the client, the probes and
`build_requests` load httpx, aiohttp or pydantic: import them from `tuner.workload.benchmark`,
`tuner.workload.client`, `tuner.workload.probe` and `tuner.workload.datasets`.
"""

from tuner.workload.exact import exact_length_prompt
from tuner.workload.longdoc import longdoc_prompts
from tuner.workload.schedule import arrival_times
from tuner.workload.sse import SseDecoder, StreamEvent, interpret
from tuner.workload.tokenizer import load_tokenizer

__all__ = [
    "SseDecoder",
    "StreamEvent",
    "arrival_times",
    "exact_length_prompt",
    "interpret",
    "load_tokenizer",
    "longdoc_prompts",
]

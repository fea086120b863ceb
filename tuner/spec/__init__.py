"""The study file and everything read from it: the first step of the data flow.

study file (YAML) → `StudySpec` (validated, nothing started) → search space → engine argv/env.
Every user mistake in a study file is found here, at load time, as one line (`UserError`).

Modules:
- `study`: `StudySpec`, `load_study_spec(path)`, `stored_spec` (the spec a trial ran under);
- `sections`: the file's sections (engine, search space, objective, budget, hardware, ...);
- `parts`: the study file in parts (`Serving`, `Judging`, `Traffic`, `Measuring`), each a few
  sections: what a stage below the loop reads of it;
- `workload`: `WorkloadSpec`, the workload options shared with `tuner bench`;
- `space`: the search space's distributions and defaults, and a trial's engine argv and env
  (`engine_argv`, `engine_env`), the production command (`serve_argv`), vLLM's flag rules;
- `slo`: metric directions and SLO limits (`p99_ttft_ms<=2000`);
- `metric_keys`: the grammar of vLLM's metric keys (`p99_ttft_ms`, `output_throughput`);
- `vllm_rules`: vLLM's own configuration checks, with its messages;
- `parsing`, `yamlfile`, `inputs`: YAML reading, durations, pydantic errors in a user's words,
  field checks;
- `coherence`: checks across sections (combinations that would measure something else);
- `flag_values`: vLLM's numeric flags, checked as numbers and written as vLLM reads them;
- `contents`: the contents of the files a study file names, as digests;
- `model_source`: where `engine.model` is on this machine, found as vLLM finds it;
- `outputs`: files and folders the tuner writes where a user asks, checked before the work;
- `figures`: how a number reads to a person: one formatter for every table and line;
- `suggest`: the closest valid name to a mistyped one;
- `values`: the types of a config's values (`Scalar`, `Params`, `Flags`).

What may be assumed: a `StudySpec` is valid (every later stage trusts it); the pure modules
(`slo`, `metric_keys`, `vllm_rules`, `inputs`, `values`) do no I/O and load no third-party package.

Re-exported here: only the pure names, so that importing one of them stays cheap. `StudySpec`,
`load_study_spec`, `WorkloadSpec` and the argv functions load pydantic (and `space` optuna),
and the simulation core must not reach the study file: import them from `tuner.spec.study`,
`tuner.spec.workload` and `tuner.spec.space`.
"""

from tuner.spec.metric_keys import Direction, parse_latency_key
from tuner.spec.slo import SloLimit, metric_direction, parse_slo
from tuner.spec.vllm_rules import scheduler_error

__all__ = [
    "Direction",
    "SloLimit",
    "metric_direction",
    "parse_latency_key",
    "parse_slo",
    "scheduler_error",
]

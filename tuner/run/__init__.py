"""The study loop: ask Optuna, run one trial through the pipeline, tell Optuna, until the budget.

`StudyLoop` (budget, signals, recovery, sampler) → per trial `TrialPipeline`: reuse of an
identical config, vLLM's rules, the memory precheck, measure (a runner), score (`tuner.trial`)
→ `Outcome` → the stored trial; afterwards the run's `RunSummary`.

Modules:
- `loop`: `StudyLoop`, `Interrupted`;
- `pipeline`: one trial (`TrialPipeline`): the gates, measure, score;
- `outcome`: one trial's input and how it ended (`TrialInput`, `Outcome`);
- `gate`: the `Gate` protocol: one step before a launch that refuses a config or passes it;
- `gates`: `GATES`, every gate before a launch, in order (reuse, rules, precheck, prediction);
- `box_faults`: a busy GPU or a GPU fault, the box's and not the config's: why the run stops;
- `checks`: what `tuner run` refuses before it touches the database or starts an engine;
- `lock`: one process per SQLite study, many workers per server study, config claims;
- `recovery`: cleaning up after a tuner that died mid-trial (heartbeats, orphaned engines);
- `slots`: several trials at once on one box, one per GPU slot;
- `sampling`: the study's sampler and the public-API suggestion of a config;
- `progress`: the live display (rich) or silence (tests);
- `summary`: what one `tuner run` / `tuner plan` invocation did;
- `session`: one `tuner run` or `tuner plan`, start to end: the package's entry point;
- `signals`: Ctrl-C, SIGTERM and SIGHUP during a run, and their handlers;
- `reading`: the study as the loop reads it, once per trial, and the loop's writes to it;
  a run takes only its own spec's queued trials;
- `rejudge`: a study file whose judging alone changed is re-scored, not re-measured;
- `preflight`: every problem of a study in one pass, before the night (`tuner check`), and
  its notes: a search space against vLLM's rules and defaults on the study's GPU, how far to
  trust `tuner plan` (fitted profile? how far off the trials?);
- `cost`: the night's cost before it starts, against the timeout;
- `planned`: `tuner plan`'s trials one at a time in a throw-away store (the plan preview's loop);
- `flagcheck`: flag names the engine does not accept, found before the night.

What may be assumed: a trial is stored once, in one transaction with its requests; an
interrupted run leaves nothing RUNNING that the next run cannot recover. Read-only commands
and `tuner.results` never import this package (an import-linter contract).

Nothing is re-exported here: `tuner bench` imports `checks` (the length checks), and a
re-export of the loop would load it (optuna, the storage, the runners) into every such
import. Import from the modules: `tuner.run.loop.StudyLoop`, `tuner.run.outcome.Outcome`,
`tuner.run.summary.RunSummary`.
"""

__all__: list[str] = []

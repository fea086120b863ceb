"""`tuner init`: a study file drafted from what is on the box, checked, ready to run
(docs/study-file.md, "tuner init").

Modules:
- `box`: the GPUs this machine has (nvidia-smi, else NVML; neither: none), as built-in names;
- `options`: `InitOptions` and the checks that need only the options (before slow imports);
- `traffic`: the workload and default SLOs of each traffic kind (chat, longdoc, a JSONL file);
- `study`: the study drafted and checked as `tuner plan` checks a study, its objective (the
  one module of init that reads the mode asked for), its rate and budget from the simulator
  (`tuner.run.cost.night_cost`, the preflight's estimate of one trial);
- `sources`: what the study names, given by an option or found here: the model, the GPUs and
  the engine, the search-space file, the workload's tokenizer;
- `draft`: the study file's mapping as it is drafted, typed section by section, and built from
  those sources and the traffic (its paths named from the file's folder);
- `write`: the file, with comments saying what was chosen and why, read back, then placed;
- `baseline`: the search space written, vLLM's defaults on the GPU as its `default:`s;
- `model_len`: the `max-model-len` written: what the traffic needs;
- `rate`: the request rate written: the highest at which vLLM's defaults meet the SLO;
- `reach`: whether a night can meet its SLO at all (the requests sent one at a time), and
  what would reach it;
- `preview`: a short `tuner plan` before the night (`tuner init`, `tuner check`).

What may be assumed: nothing is written until the study has passed every check, and an
existing file is replaced only when asked; a mistake is one `UserError` line. Re-exports
nothing: import from the modules (`tuner.scaffold.study.draft_study`).
"""

__all__: list[str] = []

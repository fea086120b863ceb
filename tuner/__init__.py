"""tuner: an automated tuner for vLLM serving parameters.

One package per stage of the data flow, each importing only from the stages below it
(docs/architecture.md; `lint-imports` holds the layers):
- `spec`: the study file, validated, and the search space and engine argv read from it;
- `measure`: records → metrics → objective (pure computation);
- `engine`: start, watch, classify and stop an engine process, real or simulated;
- `workload`: the requests, their timing, and the streaming client that times them;
- `sim`: the simulated engine (a plain-computation core) and `tuner sim serve`;
- `trial`: what a trial stores and how it is read back;
- `store`: the study database (Optuna's storage plus the tuner's tables);
- `runners`: measure one configuration, on an engine or in virtual time;
- `fidelity`: the simulator beside a study (screen, calibration, robustness, warm starts);
- `run`: the study loop and one trial's pipeline;
- `results`: what people take out of a stored study;
- `scaffold`: `tuner init`'s ready study file;
- `verify`: `tuner verify`, a running deployment re-measured against the study;
- `commands`, `cli`: the command line;
- `errors`: every exception the tuner defines; `tls`: one TLS context for every HTTP client;
- `tools`: what the Makefile and `tuner make-tiny-model` call (outside the layers).
"""

__version__ = "0.1.0"

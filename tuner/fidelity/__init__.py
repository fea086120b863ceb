"""Cheaper signals than a real trial, and checks of the answer: the simulator around a study.

A study's measured trials → a calibrated simulator (`calibration`) → the screen chooses the
next real trial (`screen`, `search.fidelity: multi`); the best config → re-simulated (or
re-measured, `--confirm`) under perturbed workloads → robust or FRAGILE (`robustness`,
`robustness_measured`); the best config with each changed flag reverted → the flags that
carry its gain (`smallest`, `smallest_check`, `smallest_measured`); another study's best
configs → this study's first trials (`warm_start`).

Modules:
- `bands`: how far off a simulated figure can be, the band that each SIMULATED figure
  carries (a regime from the workload's shape, a ratio table, narrowed on a study's residuals;
  pure, light: the results that print it load no simulator);
- `screen`: `Screen`, the calibrated simulator that picks every real trial;
- `calibration`: `Trust`, the simulator against the measured trials: which count, how far off;
- `robustness`: does the best's gain survive prompts ±3 % and rate ±10 % (SIMULATED);
- `robustness_measured`: the same check on the engine (`tuner run --confirm K`);
- `smallest`: which of the best's changed flags carry its gain (pure: the rule);
- `smallest_check`: each changed flag reverted alone on the calibrated simulator (SIMULATED);
- `smallest_measured`: the same on the engine (`tuner run --confirm K`);
- `best_check`: the `Check` protocol; the best config and its baseline, one config's run, the
  record stored (any runner);
- `checks`: `CHECKS`, every check of the best config at a run's end, in order;
- `warm_start`: the best configs of another stored study, queued first;
- `predict_skip`: never launch what the calibrated simulator already rules out (all of the skip);
- `engine_speed`: how fast the engine is against the study's profile, fitted on one measured trial;
- `unit_cube`: the screen's unit cube (each parameter mapped to [0, 1)) and distances in it.

What may be assumed: every figure from the simulator is labelled SIMULATED and never stored
as a measured trial; a verdict measured on the engine says so and wins over the simulated one.

Nothing is re-exported here: `screen`, `calibration` and `robustness*` load scipy (the fit)
and `warm_start` the database, and the run loop imports each only when a study asks for it;
a re-export would load them all for any one. Import from the modules.
"""

__all__: list[str] = []

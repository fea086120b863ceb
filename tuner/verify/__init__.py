"""`tuner verify`: after the ship, re-measure a running deployment against what the study
promised, and say when to tune again (docs/verify.md).

Modules:
- `compare`: the judgement (pure): each figure against the stored one with both 95 %
  intervals, the SLO, the one-line verdict and its exit code; the engine's flags against the
  exported command's;
- `caps`: what may be sent (pure): the URL (loopback, or the host named), the study's
  workload cut to the request, rate and time caps;
- `engine_info`: what the engine says about itself (`/version`, `/v1/models`, `/metrics`,
  dev mode's `/server_info`), GETs only;
- `changes`: what changed (flags, vLLM version, GPU) and the re-tune command with its cost;
- `capacity`: a capacity study's workload at the shipped capacity rate, and the verdict's
  words for the rate it was judged at (pure);
- `predict`: what the study's calibrated simulator predicts for the user's traffic
  (SIMULATED);
- `request_log`: the user's request log (`--request-log`) against the study's workload;
- `outcome`: what one verify found, written down: the stored JSON document and the lines;
- `session`: one verify, from the study's shipped config to its judged findings;
- `stored`: what a verify reads from the store (the shipped config, as its `Target`) and adds
  to it (the verify's document, in the study's history).

What may be assumed: a verify never restarts, resets or reconfigures the engine, and sends no
more than its caps allow; the stored figures it compares with are the shipped config's
(`tuner.results.shipped`, the trial `tuner export` writes).

Re-exported: nothing (the session loads httpx and the workload client).
"""

"""`tuner sim serve` with a random fault drawn at each start (benchmarks/soak.py).

    python benchmarks/soak_engine.py FAULTS.json -m tuner.cli sim serve [its arguments...]

FAULTS.json maps a fault's name to its weight and the `sim serve` flags that inject it, e.g.
{"none": [3, []], "crash": [1, ["--fault-crash-after", "20"]]}. The study file names this
script as its engine command once, so the faults are not part of the spec: like flaky
hardware, they hit some trials of one spec (a baseline, a capacity search's third step, a
`--confirm` re-run) and not others. The fault drawn is logged first (the engine's log is the
trial's log), then the script becomes the rest of its command line, run by this python, with
the fault's flags added (exec: same pid, same process group, which is what the tuner records
and stops). The command names `tuner.cli sim serve`, so the tuner knows the engine is the
simulated one (its preflight checks the simulator's flags, not vLLM's).
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

MARK = "soak fault:"  # the line each engine log starts with (benchmarks/soak.py counts them)


def main() -> None:
    faults = json.loads(Path(sys.argv[1]).read_text())
    names = list(faults)
    name = random.Random().choices(names, weights=[faults[n][0] for n in names])[0]
    print(f"{MARK} {name}", file=sys.stderr, flush=True)
    argv = [sys.executable, *sys.argv[2:], *faults[name][1]]
    os.execv(sys.executable, argv)


if __name__ == "__main__":
    main()

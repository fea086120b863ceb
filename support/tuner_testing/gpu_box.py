"""A stand-in `nvidia-smi` for tests of a GPU box's state (tuner.engine.gpu_memory): an
executable named `nvidia-smi` in a folder that a test puts first on PATH.

It answers the two queries the tuner makes (`--query-gpu=...` and `--query-compute-apps=...`,
CSV without header or units) from a JSON file: the GPUs, the processes holding memory, and
optionally the simulated engine's state file (`tuner sim serve --fault-state`), whose engine
holds `engine_mib` on GPU 0 while it is up and for `--fault-release-s` after its exit.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

_SCRIPT = """\
#!{python}
import json, sys
sys.path[:0] = {paths!r}
from tuner.sim.faults import held_mib
box = json.load(open({config!r}))
engine = held_mib(box["state"], box["engine_mib"]) if box.get("state") else 0
query = {{a.split("=")[0]: a.split("=")[1] for a in sys.argv[1:] if "=" in a}}
if "--query-gpu" in query:
    for i, g in enumerate(box["gpus"]):
        row = {{"index": i, "name": g["name"], "memory.total": g["total"], "uuid": f"GPU-{{i}}",
               "memory.used": g["used"] + (engine if i == 0 else 0)}}
        print(", ".join(str(row[f]) for f in query["--query-gpu"].split(",")))
elif "--query-compute-apps" in query:
    apps = box["apps"] + ([{{"pid": box["engine_pid"], "used": engine}}] if engine else [])
    for a in apps:
        row = {{"pid": a["pid"], "used_memory": a["used"], "gpu_uuid": f"GPU-{{a.get('gpu', 0)}}"}}
        print(", ".join(str(row[f]) for f in query["--query-compute-apps"].split(",")))
else:
    sys.exit("stand-in nvidia-smi: only --query-gpu and --query-compute-apps")
"""


def fake_nvidia_smi(
    folder: Path,
    *,
    gpus: list[dict[str, Any]],
    apps: list[dict[str, Any]] = (),  # type: ignore[assignment]
    state: Path | None = None,
    engine_mib: int = 0,
) -> dict[str, str]:
    """Write the stand-in into `folder`; the environment that finds it first on PATH.
    `gpus`: {"name", "used", "total"} (MiB); `apps`: {"pid", "used"[, "gpu"]}."""
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "nvidia-smi.json"
    box = {"gpus": gpus, "apps": list(apps), "state": str(state) if state else None}
    config.write_text(json.dumps({**box, "engine_mib": engine_mib, "engine_pid": 99999}))
    script = folder / "nvidia-smi"
    paths = [p for p in sys.path if p]
    script.write_text(_SCRIPT.format(python=sys.executable, paths=paths, config=str(config)))
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return {"PATH": f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"}

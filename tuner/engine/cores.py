"""CPU placement of the client beside a pinned engine."""

from __future__ import annotations

import os


class client_off_engine_cores:
    """Pin the tuner (the client) off the engine's cores while measuring: less noise."""

    def __init__(self, engine_cores: list[int] | None) -> None:
        self.engine_cores = set(engine_cores or [])
        self.saved: set[int] | None = None

    def __enter__(self) -> None:
        if not self.engine_cores or not hasattr(os, "sched_setaffinity"):
            return
        mine = os.sched_getaffinity(0)
        rest = mine - self.engine_cores
        if rest:
            self.saved = mine
            os.sched_setaffinity(0, rest)

    def __exit__(self, *exc: object) -> None:
        if self.saved is not None:
            os.sched_setaffinity(0, self.saved)

"""The verify history: each `tuner verify` stored with its study (`tuner_verifies`).

A new table needs no migration (`tuner.store.schema`: `create_all` adds it on the next
writer's open); a database no writer has opened since it lacks the table and has no history.
"""

from __future__ import annotations

import time
from typing import Any

import sqlalchemy as sa

from tuner.store.schema import verifies_table
from tuner.store.storage import Store


def save_verify(store: Store, study: str, document: dict[str, Any]) -> None:
    """Store one verify: `document` is its JSON (verdict, trial, base_url, figures)."""
    verdict = document["verdict"]
    with store.engine.begin() as conn:
        conn.execute(
            sa.insert(verifies_table).values(
                study_name=study,
                verified_at=document.get("verified_at", time.time()),
                trial_number=document.get("trial"),
                base_url=document["base_url"],
                verdict=verdict["kind"],
                exit_code=verdict["exit_code"],
                record=document,
            )
        )


def verify_history(store: Store, study: str) -> list[dict[str, object]]:
    """Every stored verify of `study`, oldest first (each its JSON document)."""
    with store.engine.connect() as conn:
        if not sa.inspect(conn).has_table(verifies_table.name):
            return []
        rows = conn.execute(
            sa.select(verifies_table.c.record)
            .where(verifies_table.c.study_name == study)
            .order_by(verifies_table.c.verified_at, verifies_table.c.id)
        ).all()
    return [row.record for row in rows]

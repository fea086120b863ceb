"""Read back what a run stored in the tuner's own tables (`tuner.store.schema`), for tests
that check the rows themselves; the tuner reads its results through Optuna's attrs."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from tuner.measure.records import RequestRecord
from tuner.store.schema import requests_table, trials_table
from tuner.store.storage import Store


def trial_row(store: Store, study: str, trial: int) -> dict[str, Any] | None:
    """The `tuner_trials` row of one trial, None when there is none."""
    where = (trials_table.c.study_name == study, trials_table.c.trial_number == trial)
    with store.engine.connect() as conn:
        row = conn.execute(sa.select(trials_table).where(*where)).mappings().first()
    return dict(row) if row else None


def request_records(store: Store, study: str, trial: int) -> list[RequestRecord]:
    """The `tuner_requests` rows of one trial, in request order."""
    where = (requests_table.c.study_name == study, requests_table.c.trial_number == trial)
    query = sa.select(requests_table).where(*where).order_by(requests_table.c.idx)
    with store.engine.connect() as conn:
        rows = conn.execute(query).mappings().all()
    fields = RequestRecord.__dataclass_fields__
    return [RequestRecord(**{k: v for k, v in r.items() if k in fields}) for r in rows]

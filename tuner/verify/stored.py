"""What `tuner verify` reads from the store and adds to it: the shipped config of the stored
study, as the `Target` a verify checks against, and the verify's document in the study's
history (`tuner.store.verifies`, `tuner verify --history`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from tuner.fidelity.warm_start import warm_configs
from tuner.results.shipped import shipped, study_points
from tuner.store.storage import Store
from tuner.store.verifies import save_verify
from tuner.trial import StudyRecord
from tuner.verify.changes import WARM_START_K
from tuner.verify.session import Target

if TYPE_CHECKING:
    import optuna


def shipped_target(study: optuna.Study) -> Target:
    """The shipped config of the stored study (a study with no trial is a UserError)."""
    points = study_points(study)
    choice, spec, _ = shipped(study, points)
    took = [p.record.engine_s for p in points if p.record.engine_s]
    mean_s = sum(took) / len(took) if took else None
    warm = warm_configs(points, study.study_name, WARM_START_K, spec)
    record = StudyRecord.of(study)
    return Target(study.study_name, choice, spec, mean_s, record, tuple(points), len(warm))


def store_verify(url: str, study: str, document: Mapping[str, object]) -> None:
    """Add one verify's document to `study`'s history in the store at `url`."""
    store = Store(url)
    try:
        save_verify(store, study, json.loads(json.dumps(document, default=str)))
    finally:
        store.close()

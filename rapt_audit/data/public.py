"""Public text that mechanisms calibrate on (WikiText-2 when present, else the demo corpus).

Never the victim's data: η calibrated to a target replacement probability must not depend on what
it protects.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from rapt_audit.api.errors import DataError
from rapt_audit.data import load_dataset

if TYPE_CHECKING:  # pragma: no cover
    from rapt_audit.pipeline.context import RunContext

#: Sentences of public text used to calibrate η, per profile.
CALIBRATION_SENTENCES = {"smoke": 150, "cpu": 1000, "paper": 5000}


def public_corpus(ctx: RunContext) -> tuple[str, list[str]]:
    """Public calibration text: WikiText-2 from the data directory when present, else the demo corpus."""

    limit = CALIBRATION_SENTENCES.get(ctx.profile, 1000)
    try:
        dataset = load_dataset("wikitext2", ctx.data_dir)
    except DataError:
        dataset = load_dataset("synthetic")
    rng = np.random.default_rng(ctx.seed_for("calibration-corpus"))
    records = dataset.records
    picked = rng.choice(len(records), size=min(limit, len(records)), replace=False)
    return dataset.name, [records[i].text for i in sorted(picked)]

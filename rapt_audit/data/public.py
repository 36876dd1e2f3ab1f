"""Public text that mechanisms calibrate on and tag their POS lexicon from (WikiText-2 when present, else the demo corpus).

Never the victim's data: η calibrated to a target replacement probability, and the candidate words
of PCT2T's categories, must not depend on what they protect.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rapt_audit.api.context import RunContext
from rapt_audit.api.errors import DataError
from rapt_audit.data import Dataset, load_dataset


#: Sentences of public text used to calibrate η, per profile.
CALIBRATION_SENTENCES = {"smoke": 150, "cpu": 1000, "paper": 5000}


def public_dataset(data_dir: str | Path | None) -> Dataset:
    """Public text: WikiText-2 from the data directory when present, else the demo corpus."""
    try:
        return load_dataset("wikitext2", data_dir)
    except DataError:
        return load_dataset("synthetic")


def public_corpus(ctx: RunContext) -> tuple[str, list[str]]:
    """Public calibration text: a sample of :func:`public_dataset`, its size set by the profile."""

    limit = CALIBRATION_SENTENCES.get(ctx.profile, 1000)
    dataset = public_dataset(ctx.data_dir)
    rng = np.random.default_rng(ctx.seed_for("calibration-corpus"))
    records = dataset.records
    picked = rng.choice(len(records), size=min(limit, len(records)), replace=False)
    return dataset.name, [records[i].text for i in sorted(picked)]

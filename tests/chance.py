"""What a predictor that learned nothing scores: the majority share of a run's victim test.

A utility test that says "better than chance" compares with this share (a constant answer of the
most frequent label scores exactly it), not with 0.5: on an unbalanced test split a majority-class
predictor clears 0.5.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Mapping

from rapt_audit.pipeline import runner
from rapt_audit.pipeline.config import RunConfig


def majority_share(labels: Iterable[Any]) -> float:
    """The share of ``labels`` held by the most frequent one."""
    counts = Counter(labels)
    return max(counts.values()) / sum(counts.values())


def victim_test_majority(config: RunConfig | Mapping[str, Any]) -> float:
    """The majority share of the victim test split of the run ``config`` (a ``RunConfig`` or a result's ``config``)."""
    config = config if isinstance(config, RunConfig) else RunConfig(**config)
    return majority_share(r.label for r in runner.plan(config).splits.victim_test)

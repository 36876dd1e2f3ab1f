"""A defense's worst case over the inversion attacks that read its release (issue #39, item 4).

Privacy is judged by the strongest attack we can run, but "strongest" is itself an estimate: two attacks
whose intervals overlap may each be the stronger one on a different resample of the victim records. The
worst case is therefore computed *inside* each bootstrap resample: on the same resampled records, every
attack's content privacy (:mod:`rapt_audit.scoring.content_tokens`, one unit for every release kind) is
computed from its per-record parts and the lowest is taken. Its point value is the lowest point value; its
interval is the percentile interval of the resampled minima, which sits below the minimum of the attacks'
intervals when they are close (the minimum of point estimates would claim more privacy than is shown). The
attack that gave the lowest privacy in most resamples is named (``strongest_attack``), with the share of
resamples in which each attack did (``lowest_share``).

An attack whose content privacy kept no per-record parts (clipped at 1: no better than the release-ignoring
prior) is held at its point value in every resample. Attacks that do not read the release (the prior,
``random_guess``) and audit estimators that report no content privacy (``mutual_info``) are not in it.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Mapping

import numpy as np

from rapt_audit.api.plugins import WORST_CASE
from rapt_audit.api.threat import ThreatModel
from rapt_audit.api.types import AttackResult, Estimate, Outcome
from rapt_audit.scoring.metrics import metric
from rapt_audit.scoring.stats import bootstrap_statistic

#: The measure it is taken over.
MEASURE = "content_privacy"
#: What a result records as its threat model: the union of the attacks' it is taken over is the reader's to
#: look up beside it; this says what it is.
WORST_CASE_THREAT = ThreatModel(knows=("release",), note="derived, not an attack: the lowest content privacy over "
                                "the inversion attacks that read the release, inside each bootstrap resample")

metric("worst_case_privacy", "privacy", True, "the lowest content privacy over the inversion attacks that read "
       "the release, computed inside each bootstrap resample of the victim records")


def worst_case(outcomes: Mapping[str, Outcome], *, reads_release: Callable[[str], bool],
               rng: np.random.Generator) -> AttackResult | None:
    """The worst case of ``outcomes`` (a result's attacks) over those that read the release and report
    :data:`MEASURE`; None when fewer than one such attack was measured.

    Args:
        outcomes: Attack name → outcome, as a run collects them.
        reads_release: Whether an attack reads the release (its threat model knows it).
        rng: The bootstrap's generator.
    """
    measured = {name: o.metrics[MEASURE] for name, o in sorted(outcomes.items())
                if name != WORST_CASE and isinstance(o, AttackResult) and MEASURE in o.metrics and reads_release(name)}
    if not measured:
        return None
    n = max(e.n for e in measured.values())
    names = list(measured)
    parts = [_parts(measured[name], n) for name in names]
    lowest: Counter[str] = Counter()

    def privacy(name: str, part: tuple[np.ndarray, np.ndarray] | None, idx: np.ndarray) -> float:
        if part is None:
            return measured[name].value
        room = part[1][idx].sum()  # the prior's misses: 0 when it recovers everything, so no attack beats it
        return 1.0 if room == 0 else min(1.0, float(part[0][idx].sum() / room))

    def minimum(idx: np.ndarray) -> float:
        values = [privacy(name, part, idx) for name, part in zip(names, parts)]
        lowest[names[int(np.argmin(values))]] += 1
        return min(values)

    estimate = bootstrap_statistic(n, minimum, rng=rng)
    point = min(e.value for e in measured.values())
    lowest[names[int(np.argmin([measured[name].value for name in names]))]] -= 1  # the point's call
    estimate = Estimate(point, min(estimate.ci_low, point), max(estimate.ci_high, point), n,
                        f"resample-minimum-{estimate.method}", estimate.level)
    resamples = sum(lowest.values())
    shares = {name: round(lowest[name] / resamples, 4) for name in names if lowest[name] > 0}
    strongest = max(shares, key=lambda name: (shares[name], -names.index(name)))
    details = {"over": names, "strongest_attack": strongest, "lowest_share": shares,
               "held_at_point": [name for name, part in zip(names, parts) if part is None],
               "measure": MEASURE, "unit": "content words (rapt_audit.scoring.content_tokens)"}
    return AttackResult(estimate, {"worst_case_privacy": estimate}, details)


def _parts(estimate: Estimate, n: int) -> tuple[np.ndarray, np.ndarray] | None:
    """``(num, den)`` arrays of ``estimate``'s per-record parts over ``n`` records, or None when it kept none
    (or holds other records: it cannot be resampled with the others)."""
    found = estimate.per_record
    if found is None or len(found) != n:
        return None
    return np.asarray(found.num, dtype=np.float64), np.asarray(found.den, dtype=np.float64)


__all__ = ["MEASURE", "WORST_CASE", "WORST_CASE_THREAT", "worst_case"]

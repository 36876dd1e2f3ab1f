"""Privacy at matched utility, paired (issue #38): every defense read on the same resampled seeds and records.

The readings and verdicts of :mod:`rapt_audit.benchmark.matched`, computed with the hierarchical paired bootstrap
of :mod:`rapt_audit.scoring.hierarchical` whenever every result of a comparable group kept its per-record
outcomes:

- **Ceiling and targets**: identity's utility on each resample's drawn seeds and records; a target is a share of
  it, so every defense of a resample is read at the same target, and each seed's frontier against that seed's
  own ceiling.
- **Reading**: a defense's private settings at each drawn seed (:func:`~rapt_audit.scoring.hierarchical.
  read_frontier`), the mean over the drawn seeds. Kinds: ``interpolated``, ``measured``, ``lower bound`` (at
  some seed every private setting keeps more utility: the grid stops before the target), ``not reached`` (at
  some seed no setting keeps that much), ``not bracketed`` (only the no-privacy setting does: never a chord
  towards sending the text in the clear), ``reference`` and ``not measured``.
- **Verdict**: the highest reading, its probability of being best and whether its lead over each other candidate
  is established (Holm, one-sided 2.5 %, joint non-reach left out) — :func:`~rapt_audit.scoring.hierarchical.
  rank`. The local-only baselines (``local``) release nothing: they are utility references, never candidates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from rapt_audit.api.types import Estimate
from rapt_audit.reporting.paired_rows import privacy_measures, utility_measures
from rapt_audit.scoring.hierarchical import (LOWER_BOUND, MEASURED, NOT_REACHED, Measure, Ranking, Resampler,
                                             interval, rank, read_frontier)
from rapt_audit.reporting.summary import Group, Row, is_local_baseline

#: The defense whose utility is the ceiling, and which is shown for reference, never named best.
REFERENCE = "identity"


@dataclass(frozen=True)
class Reading:
    """One defense's privacy at one target utility.

    Attributes:
        defense: The defense.
        value: The reading with its bootstrap interval (``None``: not reached).
        kind: ``interpolated``, ``measured`` (a setting lies at the target), ``lower bound``, ``not reached``,
            ``not bracketed`` (only the no-privacy setting keeps the target), ``reference`` (the no-privacy
            defense's own privacy) or ``not measured`` (the attack never ran on it).
        between: The settings it was read from.
        reached: The share of resamples in which the target was reached.
    """

    defense: str
    value: Estimate | None
    kind: str
    between: tuple[str, ...] = ()
    reached: float = 1.0


@dataclass
class _Defense:
    """One defense's measured settings under one attack: utility and privacy, resampled and on the data."""

    rows: list[Row]
    utility: np.ndarray        # resamples × seeds × settings
    privacy: np.ndarray
    utility_point: np.ndarray  # seeds × settings
    privacy_point: np.ndarray


@dataclass(frozen=True)
class Margin:
    """A setting's utility over sending nothing: ``margin`` (its utility minus the best local-only baseline's,
    paired) and ``share`` (of the service's gain over that baseline it keeps; None when the service gains
    nothing)."""

    row: Row
    margin: Estimate
    share: Estimate | None

    @property
    def verdict(self) -> str:
        """``beats sending nothing``, ``below sending nothing`` or ``not established`` (the margin's interval)."""
        if self.margin.ci_low > 0:
            return "beats sending nothing"
        return "below sending nothing" if self.margin.ci_high < 0 else "not established"


class Pairing:
    """The paired readings of one comparable group (built by :meth:`of`, None when it cannot be paired)."""

    def __init__(self, resampler: Resampler, utilities: dict[int, Mapping[int, Measure]], ceiling_row: Row,
                 rows: Sequence[Row]) -> None:
        self.resampler = resampler
        self.rows = list(rows)
        self.utilities = utilities
        self.ceilings = resampler.values(utilities[id(ceiling_row)])
        self.ceiling_point = resampler.point(utilities[id(ceiling_row)])
        self._values: dict[int, np.ndarray] = {}

    @classmethod
    def of(cls, group: Group, utility: str, ceiling_row: Row, resamples: int, seed: int) -> Pairing | None:
        """The pairing of ``group``, or None when some result kept no per-record utility outcomes."""
        utilities = {}
        for row in group.rows:
            if utility in row.utility:
                measures = utility_measures(row, utility)
                if measures is None:
                    return None
                utilities[id(row)] = measures
        resampler = Resampler(ceiling_row.seeds, resamples, np.random.default_rng([seed, 38]))
        return cls(resampler, utilities, ceiling_row, group.rows)

    def ceiling(self) -> Estimate:
        """The ceiling: identity's utility averaged over the seeds, with its hierarchical interval."""
        return interval(float(self.ceiling_point.mean()), self.ceilings.mean(axis=-1))

    def target(self, fraction: float) -> Estimate:
        """``fraction`` of the ceiling, with its interval."""
        return interval(fraction * float(self.ceiling_point.mean()), fraction * self.ceilings.mean(axis=-1))

    def read(self, group: Group, attack: str, rows: Mapping[str, list[Row]],
             fractions: Sequence[float]) -> dict[float, tuple[list[Reading], Ranking, str]] | None:
        """Fraction → ``attack``'s readings, ranking and verdict; None when a measured result of it kept no
        per-record parts, so the caller reads it unpaired."""
        headline = group.headline(attack)
        measured: dict[str, list[tuple[Row, Mapping[int, Measure]]]] = {}
        for defense, mine in rows.items():
            measured[defense] = []
            for row in mine:
                if isinstance(row.privacy.get(attack), Estimate) and id(row) in self.utilities:
                    measures = privacy_measures(row, attack, headline)
                    if measures is None:
                        return None
                    measured[defense].append((row, measures))
        sampled = {d: self._sampled(listed, d == REFERENCE) for d, listed in measured.items()}
        out = {}
        for f in fractions:
            readings, draws = [], {}
            for defense, found in sampled.items():
                reading, drawn = self._reading(defense, found, f)
                readings.append(reading)
                if drawn is not None and defense != REFERENCE:
                    draws[defense] = drawn
            out[f] = (readings, *verdict(readings, draws))
        return out

    def against_local(self) -> list[Margin]:
        """Every measured setting's utility against sending nothing: the best local-only baseline's utility (the
        best client on each resample's drawn seed and records, which favours the baseline) subtracted, paired,
        and the share of the service's gain over it (identity's utility minus it) that the setting keeps."""
        local = [r for r in self.rows if is_local_baseline(r.defense) and id(r) in self.utilities]
        if not local:
            return []
        best = np.stack([self._cached(self.utilities[id(r)]) for r in local], axis=-1).max(axis=-1)
        best_point = np.stack([self.resampler.point(self.utilities[id(r)]) for r in local], axis=-1).max(axis=-1)
        gain, gain_point = (self.ceilings - best).mean(axis=-1), float((self.ceiling_point - best_point).mean())
        out = []
        for row in self.rows:
            if is_local_baseline(row.defense) or id(row) not in self.utilities:
                continue
            drawn = (self._cached(self.utilities[id(row)]) - best).mean(axis=-1)
            point = float((self.resampler.point(self.utilities[id(row)]) - best_point).mean())
            with np.errstate(divide="ignore", invalid="ignore"):
                share = interval(point / gain_point, drawn / gain) if gain_point > 0 else None
            out.append(Margin(row, interval(point, drawn), share))
        return out

    def _cached(self, measures: Mapping[int, Measure]) -> np.ndarray:
        key = id(measures)
        if key not in self._values:
            self._values[key] = self.resampler.values(measures)
        return self._values[key]

    def _sampled(self, listed: list[tuple[Row, Mapping[int, Measure]]], reference: bool) -> _Defense | None:
        # The reference is read at its own (only) setting; every other defense at its private settings.
        chosen = listed if reference else [(r, m) for r, m in listed if not r.no_privacy]
        if not chosen:
            return None
        utils = [self.utilities[id(r)] for r, _ in chosen]
        return _Defense([r for r, _ in chosen],
                        np.stack([self._cached(u) for u in utils], axis=-1),
                        np.stack([self.resampler.values(m) for _, m in chosen], axis=-1),
                        np.stack([self.resampler.point(u) for u in utils], axis=-1),
                        np.stack([self.resampler.point(m) for _, m in chosen], axis=-1))

    def _reading(self, defense: str, found: _Defense | None, fraction: float) -> tuple[Reading, np.ndarray | None]:
        if found is None:
            return Reading(defense, None, "not measured", (), 0.0), None
        if defense == REFERENCE:
            drawn = found.privacy[..., 0].mean(axis=-1)
            value = float(found.privacy_point[:, 0].mean())
            return Reading(defense, interval(value, drawn), "reference", (found.rows[0].setting,)), drawn
        values, _, _, _ = read_frontier(found.utility, found.privacy, fraction * self.ceilings)
        drawn = values.mean(axis=-1)  # NaN when some drawn seed does not reach the target
        reached = float(np.mean(~np.isnan(drawn)))
        targets = fraction * self.ceiling_point
        point, code, above, below = read_frontier(found.utility_point, found.privacy_point, targets)
        if np.isnan(point).any():
            return Reading(defense, None, self._why_not(defense, found, targets, code), (), reached), drawn
        labels = [r.setting for r in found.rows]
        between = tuple(dict.fromkeys(labels[i] for pair in zip(below, above) for i in pair if i >= 0))
        kind = ("lower bound" if (code == LOWER_BOUND).any() else
                "measured" if (code == MEASURED).all() else "interpolated")
        return Reading(defense, interval(float(point.mean()), drawn), kind, between, reached), drawn

    def _why_not(self, defense: str, found: _Defense, targets: np.ndarray, code: np.ndarray) -> str:
        """``not bracketed`` when, at every seed a private setting misses, the no-privacy setting reaches."""
        missing = code == NOT_REACHED
        open_rows = [r for r in self.rows if r.defense == defense and r.no_privacy and id(r) in self.utilities]
        for row in open_rows:
            reach = self.resampler.point(self.utilities[id(row)]) >= targets
            if reach[missing].all():
                return "not bracketed"
        return "not reached"


def verdict(readings: Sequence[Reading], draws: Mapping[str, np.ndarray]) -> tuple[Ranking, str]:
    """The ranking of the candidates and the best verdict's text (this module's docstring)."""
    candidates = [r for r in readings if r.defense != REFERENCE and not is_local_baseline(r.defense)
                  and r.value is not None]
    best = max(candidates, key=lambda r: r.value.value) if candidates else None  # type: ignore[union-attr]
    ranking = rank({d: v for d, v in draws.items() if not is_local_baseline(d)}, best.defense if best else None)
    if best is None:
        return ranking, "no defense reaches it"
    chance = f"P(best) {ranking.p_best.get(best.defense, 0.0):.2f}"
    ties = [d for d, held in ranking.established.items() if not held]
    if ties:
        return ranking, f"no significant difference: {best.defense}, {', '.join(ties)} ({chance})"
    if len(candidates) == 1:
        return ranking, f"{best.defense} (the only defense that reaches it; {chance})"
    bounded = [r.defense for r in candidates if r is not best and r.kind == "lower bound"]
    if bounded:
        return ranking, (f"{best.defense} leads ({chance}); not established against {', '.join(bounded)} (its grid "
                         "stops above the target, so its reading is a lower bound)")
    return ranking, f"{best.defense} ({chance})"


__all__ = ["Margin", "Pairing", "REFERENCE", "Reading", "verdict"]

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

import warnings
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import numpy as np

from rapt_audit.api.types import Estimate
from rapt_audit.reporting.paired_rows import privacy_measures, utility_measures
from rapt_audit.scoring.hierarchical import (LOWER_BOUND, MEASURED, NOT_REACHED, Measure, Ranking, Resampler,
                                             interval, interval_with_seeds, rank, read_frontier)
from rapt_audit.reporting.summary import Group, Row, is_local_baseline, is_reference


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
    nothing; the raw ratio, above one for a setting whose utility exceeds the reference's: the report shows it
    bounded, :func:`rapt_audit.benchmark.render._share_cell`)."""

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
        self._values: dict[int, np.ndarray] = {}
        # Through the cache: identity's row is read again as a setting (its margin, its reference reading).
        self.ceilings = self._cached(utilities[id(ceiling_row)])
        self.ceiling_point = resampler.point(utilities[id(ceiling_row)])

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
        if not same_records(utilities.values()):
            return None
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
        if not same_records([m for listed in measured.values() for _, m in listed]):
            return None  # another defense's records at a seed: they cannot be drawn jointly
        sampled = {d: self._sampled(listed, is_reference(d)) for d, listed in measured.items()}
        out = {}
        for f in fractions:
            readings, draws, per_seed = [], {}, {}
            for defense, found in sampled.items():
                reading, drawn, seeds = self._reading(defense, found, f)
                readings.append(reading)
                if drawn is not None and not is_reference(defense):
                    draws[defense], per_seed[defense] = drawn, seeds
            out[f] = (readings, *verdict(readings, draws, per_seed))
        return out

    def against_local(self) -> list[Margin]:
        """Every measured setting's utility against sending nothing: the best local-only baseline's utility (the
        best client on each resample's drawn seed and records, which favours the baseline) subtracted, paired,
        and the share of the service's gain over it (identity's utility minus it) that the setting keeps."""
        local = [r for r in self.rows if is_local_baseline(r.defense) and id(r) in self.utilities]
        if not local:
            return []
        with warnings.catch_warnings():  # a seed no client was measured at: all-NaN there, left out below
            warnings.simplefilter("ignore", RuntimeWarning)
            best = np.nanmax(np.stack([self._cached(self.utilities[id(r)]) for r in local], axis=-1), axis=-1)
            best_point = np.nanmax(np.stack([self.resampler.point(self.utilities[id(r)]) for r in local], axis=-1),
                                   axis=-1)
        gain_seeds = self.ceiling_point - best_point
        gain = _seed_mean(self.ceilings - best)
        # The share of the gain is read only where the service's gain over sending nothing is established.
        established_gain = gain_seeds.size and np.nanmean(gain_seeds) > 0 and interval_with_seeds(
            float(np.nanmean(gain_seeds)), gain, gain_seeds).ci_low > 0
        out = []
        for row in self.rows:
            if is_local_baseline(row.defense) or id(row) not in self.utilities:
                continue
            per_seed = self.resampler.point(self.utilities[id(row)]) - best_point
            if np.isnan(per_seed).all():
                continue  # no seed shared with a baseline: nothing to compare
            drawn = _seed_mean(self._cached(self.utilities[id(row)]) - best)
            point = float(np.nanmean(per_seed))
            share = None
            if established_gain:
                with np.errstate(divide="ignore", invalid="ignore"):
                    ratio = drawn / gain
                share = interval(point / float(np.nanmean(gain_seeds)), np.where(np.isfinite(ratio), ratio, np.nan))
            out.append(Margin(row, interval_with_seeds(point, drawn, per_seed), share))
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

    def _reading(self, defense: str, found: _Defense | None,
                 fraction: float) -> tuple[Reading, np.ndarray | None, np.ndarray | None]:
        """The reading, its resampled values and its per-seed values on the data (NaN: not read at that seed)."""
        if found is None:
            return Reading(defense, None, "not measured", (), 0.0), None, None
        if is_reference(defense):
            drawn, seeds = _seed_mean(found.privacy[..., 0]), found.privacy_point[:, 0]
            if np.isnan(seeds).all():
                return Reading(defense, None, "not measured", (), 0.0), None, seeds
            value = float(np.nanmean(seeds))
            return (Reading(defense, interval_with_seeds(value, drawn, seeds), "reference", (found.rows[0].setting,)),
                    drawn, seeds)
        values, _, _, _ = read_frontier(found.utility, found.privacy, fraction * self.ceilings)
        drawn = _read_over_seeds(values, _measured(found.utility, found.privacy))
        reached = float(np.mean(~np.isnan(drawn)))
        targets = fraction * self.ceiling_point
        point, code, above, below = read_frontier(found.utility_point, found.privacy_point, targets)
        measured = _measured(found.utility_point, found.privacy_point)
        if not measured.any():
            return Reading(defense, None, "not measured", (), 0.0), None, point
        if np.isnan(point[measured]).any():
            return Reading(defense, None, self._why_not(defense, found, targets, code), (), reached), drawn, point
        labels = [r.setting for r in found.rows]
        between = tuple(dict.fromkeys(labels[i] for pair in zip(below, above) for i in pair if i >= 0))
        kind = ("lower bound" if (code[measured] == LOWER_BOUND).any() else
                "measured" if (code[measured] == MEASURED).all() else "interpolated")
        value = float(point[measured].mean())
        return Reading(defense, interval_with_seeds(value, drawn, point), kind, between, reached), drawn, point

    def _why_not(self, defense: str, found: _Defense, targets: np.ndarray, code: np.ndarray) -> str:
        """``not bracketed`` when, at every seed a private setting misses, the no-privacy setting reaches."""
        missing = (code == NOT_REACHED) & _measured(found.utility_point, found.privacy_point)
        open_rows = [r for r in self.rows if r.defense == defense and r.no_privacy and id(r) in self.utilities]
        for row in open_rows:
            reach = self.resampler.point(self.utilities[id(row)]) >= targets
            if reach[missing].all():
                return "not bracketed"
        return "not reached"


def _measured(utility: np.ndarray, privacy: np.ndarray) -> np.ndarray:
    """Where (resample × seed, or seed) some setting was measured at all: a seed a defense never ran is not a
    target it missed."""
    return (~(np.isnan(utility) | np.isnan(privacy))).any(axis=-1)


def _read_over_seeds(values: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """Each resample's reading: the mean over its drawn seeds where the defense was measured; NaN where one of those
    does not reach the target, or none was measured."""
    missed = (np.isnan(values) & measured).any(axis=-1)
    return np.where(missed, np.nan, _seed_mean(np.where(measured, values, np.nan)))


def _seed_mean(values: np.ndarray) -> np.ndarray:
    """The mean over the drawn seeds (last axis) that have a value; NaN where none has."""
    count = (~np.isnan(values)).sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(count == 0, np.nan, np.nansum(values, axis=-1) / count)


def same_records(measures: Iterable[Mapping[int, Measure]]) -> bool:
    """Whether every measure holds as many records at a seed as every other measure of its kind there, as measures
    of one benchmark's defenses do (the same victim records); held values (no parts) count as any."""
    counts: dict[int, set[int]] = {}
    for by_seed in measures:
        for seed, measure in by_seed.items():
            counts.setdefault(seed, set()).update(len(p[0]) for p in measure.parts if not isinstance(p, float))
    return all(len(sizes) <= 1 for sizes in counts.values())


def verdict(readings: Sequence[Reading], draws: Mapping[str, np.ndarray],
            per_seed: Mapping[str, np.ndarray] | None = None) -> tuple[Ranking, str]:
    """The ranking of the candidates and the best verdict's text (this module's docstring); ``per_seed``: each
    candidate's readings at the seeds, for the seed-level test of :func:`~rapt_audit.scoring.hierarchical.rank`."""
    candidates = [r for r in readings if not is_reference(r.defense) and not is_local_baseline(r.defense)
                  and r.value is not None]
    best = max(candidates, key=lambda r: r.value.value) if candidates else None  # type: ignore[union-attr]
    ranking = rank({d: v for d, v in draws.items() if not is_local_baseline(d)}, best.defense if best else None,
                   per_seed)
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


__all__ = ["Margin", "Pairing", "Reading", "verdict"]

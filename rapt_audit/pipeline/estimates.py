"""How long a sweep's cells will take: the one estimator behind every figure of time to come (issue #65).

The benchmark dry run's cost of each cell and its total, whether the next cell fits in what ``--time-budget``
leaves (:class:`~rapt_audit.pipeline.time_budget.TimeBudget`), and the progress line's "about N min left" (the
in-process sweep's and :class:`~rapt_audit.pipeline.cell_driver.CellDriver`'s) are all :class:`Estimator`'s. It
learns as cells finish: the first finished cell of a (defense, dataset) pair sets the estimate of the pair's
other cells, and moves the estimates of the pairs not measured yet. A cell's estimate is the first of these
that applies, and says which (:attr:`Estimate.basis`, :attr:`Estimate.source`):

1. ``fixed``: a figure for this cell alone (a stale cell: what its stale stages took);
2. ``measured``: the mean of the pair's finished cells (this sweep's, and those its folder held);
3. ``given``: the caller's estimate of the cell (:attr:`~rapt_audit.pipeline.sweep.Cell.expected_s`);
4. ``figure``: a prior figure for the pair (a benchmark's ``costs.toml`` figure for its profile, service
   model and method), times how this machine compares with the figures: the finished pairs' cells on the same
   dataset (else on any) against their own figures;
5. ``others``: the median cost of the other defenses on the dataset (measured, else their figures), those that
   release what this one releases where there are any, times the median ratio of this defense's finished cells
   to theirs on the other datasets (1 when it has none yet);
6. ``fallback``: a figure measured under another service model or method, which the source says;
7. ``guess``: a flat guess (a benchmark profile's ``default``);
8. ``sweep``: the mean of every finished cell of the sweep; else ``none``, no estimate (a sweep with nothing
   to judge by starts its cells freely).

What the estimator starts from (:class:`Evidence`: the figures, the folder's finished cells, the stale cells'
own figures) is written by a benchmark run into its folder (:data:`ESTIMATES_FILE`) before its cells start,
so that the sweep's loops, in this process or in an executor's driver, read the very evidence its dry run
showed; the finished cells' own results stay the record of what each took.
"""

from __future__ import annotations

import statistics
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from rapt_audit.api.files import write_json_atomic
from rapt_audit.api.parsing import DocumentError, read_document

ESTIMATES_FILE = "estimates.json"
SCHEMA = "rapt-audit/estimates/1"
Pair = tuple[str, str]


def duration(seconds: float) -> str:
    """``42 s``, ``7 min`` or ``2.5 h``: a duration for progress lines."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


@dataclass(frozen=True)
class Figure:
    """A prior figure for the cells of one (defense, dataset): seconds a cell, where it comes from, and whether it
    was measured under the sweep's own service model and method (``exact``) or is a fallback from others."""

    defense: str
    dataset: str
    seconds: float
    source: str
    exact: bool = True


@dataclass(frozen=True)
class Evidence:
    """What an :class:`Estimator` starts from.

    Attributes:
        figures: Prior figures by (defense, dataset), exact or fallback (at most one of each per pair).
        measured: ``(cell name, defense, dataset, seconds)`` of the cells finished before (their whole cost).
        fixed: Cell name → ``(seconds, source)``: a figure for that cell alone (a stale cell's stale stages).
        kinds: Defense → what it releases (``texts``), so that a defense is compared with those like it.
        guess: ``(seconds, source)`` of the flat guess, where there is one.
        no_figure: How a source says that a pair has no figure (``{defense}`` and ``{dataset}`` filled in).
    """

    figures: tuple[Figure, ...] = ()
    measured: tuple[tuple[str, str, str, float], ...] = ()
    fixed: Mapping[str, tuple[float, str]] = field(default_factory=dict)
    kinds: Mapping[str, str] = field(default_factory=dict)
    guess: tuple[float, str] | None = None
    no_figure: str = "no figure for {defense} on {dataset}"

    def to_dict(self) -> dict[str, Any]:
        """The evidence as :data:`ESTIMATES_FILE` holds it."""
        return {"schema": SCHEMA, "no_figure": self.no_figure,
                "guess": None if self.guess is None else {"seconds": self.guess[0], "source": self.guess[1]},
                "figures": [{"defense": f.defense, "dataset": f.dataset, "seconds": f.seconds, "source": f.source,
                             "exact": f.exact} for f in self.figures],
                "measured": [{"cell": n, "defense": d, "dataset": x, "seconds": s} for n, d, x, s in self.measured],
                "fixed": {n: {"seconds": s, "source": src} for n, (s, src) in self.fixed.items()},
                "kinds": dict(self.kinds)}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> Evidence:
        """Inverse of :meth:`to_dict`.

        Raises:
            ValueError: for a document of another schema or shape.
        """
        if not isinstance(doc, Mapping) or doc.get("schema") != SCHEMA:
            raise ValueError(f"not an estimates document of schema {SCHEMA!r}")
        try:
            guess = doc.get("guess")
            return cls(figures=tuple(Figure(str(f["defense"]), str(f["dataset"]), float(f["seconds"]), str(f["source"]),
                                            bool(f["exact"])) for f in doc["figures"]),
                       measured=tuple((str(m["cell"]), str(m["defense"]), str(m["dataset"]), float(m["seconds"]))
                                      for m in doc["measured"]),
                       fixed={str(n): (float(v["seconds"]), str(v["source"])) for n, v in doc["fixed"].items()},
                       kinds={str(k): str(v) for k, v in doc["kinds"].items()},
                       guess=None if guess is None else (float(guess["seconds"]), str(guess["source"])),
                       no_figure=str(doc["no_figure"]))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"malformed estimates document ({type(exc).__name__}: {exc})") from None


def write_evidence(out: Path, evidence: Evidence) -> None:
    """Store ``evidence`` in the sweep folder ``out`` (:data:`ESTIMATES_FILE`), for the sweep's loops to read."""
    write_json_atomic(Path(out) / ESTIMATES_FILE, evidence.to_dict())


def read_evidence(out: Path | None) -> Evidence:
    """The evidence stored in the sweep folder ``out``; none (empty evidence) when there is no such file, and, with
    a warning, when it cannot be read (the sweep then judges by its finished cells alone)."""
    path = None if out is None else Path(out) / ESTIMATES_FILE
    if path is None or not path.is_file():
        return Evidence()
    try:
        return Evidence.from_dict(read_document(path, source=str(path), fmt="json")[1])
    except (DocumentError, ValueError) as exc:
        warnings.warn(f"{path} is unreadable ({exc}); estimating from the finished cells alone (a benchmark run "
                      "rewrites it)", stacklevel=2)
        return Evidence()


@dataclass(frozen=True)
class Estimate:
    """A cell's estimated seconds (``None``: nothing to judge by), where they come from, and the kind of evidence
    (``fixed``, ``measured``, ``given``, ``figure``, ``others``, ``fallback``, ``guess``, ``sweep`` or ``none``)."""

    seconds: float | None
    source: str
    basis: str


def pair_of(cell: Any) -> Pair:
    """The (defense, dataset) a sweep cell belongs to, from its configuration."""
    return (str(cell.config.defense), str(cell.config.dataset or ""))


class Estimator:
    """The estimates of a sweep's cells, learnt as cells finish (see the module docstring)."""

    def __init__(self, evidence: Evidence | None = None) -> None:
        self.evidence = evidence or Evidence()
        self.figures = {(f.defense, f.dataset, f.exact): f for f in self.evidence.figures}
        #: Cell name → (pair, seconds) of every finished cell; a cell observed again replaces its figure.
        self.finished: dict[str, tuple[Pair, float]] = {n: ((d, x), s) for n, d, x, s in self.evidence.measured}
        self._memo: dict[Any, Any] = {}

    def observe(self, name: str, pair: Pair, seconds: float) -> None:
        """A cell finished, taking ``seconds`` run whole: its pair is measured from now on."""
        self.finished[name] = (pair, float(seconds))
        self._memo.clear()

    def means(self) -> dict[Pair, float]:
        """The mean seconds of each measured pair's finished cells."""
        if "means" not in self._memo:
            seen: dict[Pair, list[float]] = {}
            for pair, seconds in self.finished.values():
                seen.setdefault(pair, []).append(seconds)
            self._memo["means"] = {p: sum(v) / len(v) for p, v in seen.items()}
        return self._memo["means"]

    def estimate(self, cell: Any) -> Estimate:
        """The estimate of one sweep cell (its name, configuration and :attr:`expected_s`)."""
        if cell.name in self.evidence.fixed:
            seconds, source = self.evidence.fixed[cell.name]
            return Estimate(seconds, source, "fixed")
        pair = pair_of(cell)
        if pair not in self.means() and getattr(cell, "expected_s", None) is not None:
            return Estimate(float(cell.expected_s), "the sweep's own estimate of the cell", "given")
        return self.pair_estimate(pair)

    def pair_estimate(self, pair: Pair) -> Estimate:
        """The estimate of a cell of ``pair`` that has no figure of its own (steps 2 and 4 to 8)."""
        if pair not in self._memo:
            self._memo[pair] = self._pair_estimate(pair)
        return self._memo[pair]

    def _pair_estimate(self, pair: Pair) -> Estimate:
        defense, dataset = pair
        runs = [s for p, s in self.finished.values() if p == pair]
        if runs:
            return Estimate(sum(runs) / len(runs), f"measured: mean of {len(runs)} finished {defense} cell(s) on "
                                                   f"{dataset}", "measured")
        figure = self.figures.get((defense, dataset, True))
        if figure is not None:
            factor, why = self.factor(dataset, exact=True)
            return Estimate(figure.seconds * factor, figure.source + why, "figure")
        missing = self.evidence.no_figure.format(defense=defense, dataset=dataset)
        others = self.others(pair)
        if others is not None:
            return Estimate(others.seconds, f"{missing}: {others.source}", "others")
        figure = self.figures.get((defense, dataset, False))
        if figure is not None:
            factor, why = self.factor(dataset, exact=False)
            return Estimate(figure.seconds * factor, figure.source + why, "fallback")
        if self.evidence.guess is not None:
            seconds, source = self.evidence.guess
            return Estimate(seconds, f"{missing}: {source}", "guess")
        every = [s for _, s in self.finished.values()]
        if every:
            return Estimate(sum(every) / len(every), f"mean of the sweep's {len(every)} finished cell(s)", "sweep")
        return Estimate(None, "nothing to judge by yet", "none")

    def factor(self, dataset: str, *, exact: bool) -> tuple[float, str]:
        """How this machine compares with the figures of one class (``exact`` or fallback): the measured pairs'
        seconds against their figures on ``dataset``, else (exact figures only: the machine's speed is every
        dataset's) on every dataset; ``(1.0, "")`` with none to compare."""
        means = self.means()
        compared = [p for p in means if (*p, exact) in self.figures]
        here = [p for p in compared if p[1] == dataset]
        scope = f"on {dataset}" if here else "on other datasets"
        here = here or (compared if exact else [])
        if not here:
            return 1.0, ""
        factor = sum(means[p] for p in here) / sum(self.figures[(*p, exact)].seconds for p in here)
        return factor, (f" × {factor:.2f} (this folder's finished cells {scope} took {factor:.2f} times their "
                        f"figures: {len(here)} pair(s))")

    def reference(self, pair: Pair) -> float | None:
        """What a cell of ``pair`` costs for comparing defenses: measured, else its exact figure on this machine."""
        if pair in self.means():
            return self.means()[pair]
        figure = self.figures.get((*pair, True))
        return None if figure is None else figure.seconds * self.factor(pair[1], exact=True)[0]

    def peers(self, defense: str, dataset: str) -> dict[str, float]:
        """The other defenses' :meth:`reference` costs on ``dataset``: those that release what ``defense`` releases
        where there are any, else all."""
        names = {p[0] for p in self.means()} | {f[0] for f in self.figures}
        costs = {d: c for d in sorted(names - {defense}) if (c := self.reference((d, dataset))) is not None}
        kind = self.evidence.kinds.get(defense)
        alike = {d: c for d, c in costs.items() if kind is not None and self.evidence.kinds.get(d) == kind}
        return alike or costs

    def others(self, pair: Pair) -> Estimate | None:
        """Step 5: the other defenses' median on the dataset, scaled by how this defense compared with them
        elsewhere; ``None`` when no other defense has a cost on the dataset."""
        defense, dataset = pair
        peers = self.peers(defense, dataset)
        if not peers:
            return None
        base = statistics.median(peers.values())
        ratios = {}
        for (name, other), seconds in sorted(self.means().items()):
            if name == defense and other != dataset and (there := self.peers(defense, other)):
                ratios[other] = seconds / statistics.median(there.values())
        ratio = statistics.median(ratios.values()) if ratios else 1.0
        kind = self.evidence.kinds.get(defense)
        alike = f" releasing {kind}" if kind and all(self.evidence.kinds.get(d) == kind for d in peers) else ""
        names = ", ".join(list(peers)[:4]) + (f" and {len(peers) - 4} more" if len(peers) > 4 else "")
        scaled = (f" × {ratio:.2f} ({defense}'s finished cells on {', '.join(ratios)} against theirs)" if ratios else
                  f" (no {defense} cell has finished yet to scale it by)")
        return Estimate(base * ratio, f"median of {len(peers)} other defense(s){alike} on {dataset} "
                                      f"({names}: {duration(base)}){scaled}", "others")

    def time_left(self, running: Sequence[tuple[Any, float]], queued: Sequence[Any], workers: int) -> float | None:
        """Seconds until the ``running`` cells (each with the seconds it has run) and the ``queued`` ones are done on
        ``workers`` workers; ``None`` when there are none or some cell has no estimate. A running cell past its
        estimate counts as about to end, never as negative time."""
        if not running and not queued:
            return None
        ahead = [(self.estimate(c).seconds, ran) for c, ran in running] + [(self.estimate(c).seconds, 0.0)
                                                                           for c in queued]
        if any(seconds is None for seconds, _ in ahead):
            return None
        return sum(max(0.0, seconds - ran) for seconds, ran in ahead) / max(1, workers)


__all__ = ["ESTIMATES_FILE", "Estimate", "Estimator", "Evidence", "Figure", "duration", "pair_of", "read_evidence",
           "write_evidence"]

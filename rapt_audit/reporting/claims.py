"""Whether the seed papers' claims hold in a set of stored results, each with the numbers that decide it.

The claims (RAPT v3 and the papers it compares with), read from the results of a grid such as
``--sweep defense=t2t,pct2t,rapt --sweep eta=...``:

* privacy rises as η falls (every text defense, every attack but the ``baseline`` ones);
* T2T and PCT2T are equally private at the same η;
* PCT2T's utility is higher than T2T's at the same η, and RAPT's is not lower than PCT2T's;
* RAPT's reconstruction head helps its utility (``reconstruction=true`` against ``false``);
* RAPT Pareto-dominates CAPE and DPNR (utility against each attack's empirical privacy).

and one claim of this suite about its own attacks (issue #39 item 3): the contextual Bayesian attack on text
and token-embedding releases (``bayes_inversion``) is at least as strong as the learned per-token decoder
(``mlp_inversion``) at every private setting both read, in their common unit (content privacy).

Each comparison is a difference of two estimates of one comparable group (same data, splits, model,
profile and attacks; never across groups) with a 95 % interval: *paired* where both rows were measured at
the same seeds and kept per-record outcomes, as every attack's headline and the task accuracy do (the
hierarchical paired bootstrap, :mod:`rapt_audit.scoring.hierarchical`: the seeds, then each seed's victim
records, drawn jointly for both rows, since every defense at a seed sees the same records), otherwise from the
two intervals as independent (the gate's unpaired rule), which is what slimmed and older results give.
A claim is **supported** when every comparison it makes goes its way beyond its interval, **not
supported** when one goes significantly the other way, **inconclusive** when neither, and **not
evaluable** when the results hold no comparison for it. "Equally private" and "not lower" need
margins, stated here and in every verdict: :data:`EQUIVALENCE_MARGIN` and
:data:`NON_INFERIORITY_MARGIN`. Pareto dominance compares point estimates, as the papers' plots do.

May import: :mod:`rapt_audit.api`, :mod:`rapt_audit.scoring`, :mod:`rapt_audit.pipeline` and the
reporting layer's own modules.
"""

from __future__ import annotations

import json
import math
from importlib import resources
from dataclasses import asdict, dataclass
from typing import Callable, Mapping, Sequence

from rapt_audit.api.parsing import tomllib
from rapt_audit.api.plugins import ATTACKS, capabilities_of, load as load_plugins
from rapt_audit.api.types import AttackResult, Estimate
from rapt_audit.pipeline.tidy import params_json
from rapt_audit.reporting.collect import Loaded
from rapt_audit.reporting.markdown import markdown_text
from rapt_audit.reporting.paired_rows import attack_metric_measures, privacy_measures, utility_measures
from rapt_audit.reporting.summary import Group, Row, group_results
from rapt_audit.scoring.hierarchical import Measure
from rapt_audit.scoring.significance import paired_interval, seed_of, unpaired_interval
from rapt_audit.scoring.worst_case import MEASURE

#: Two defenses count as equally private when the 95 % interval of their difference in empirical
#: privacy lies inside ± this (an absolute difference of five points of an attack's success rate).
EQUIVALENCE_MARGIN = 0.05
#: A utility counts as not lower than another when the 95 % interval of the difference stays above
#: minus this (one point of accuracy).
NON_INFERIORITY_MARGIN = 0.01

#: Whose claims are judged: the defenses each of the papers' claims names (``paper_claims.toml``, data beside this
#: module, so core code names no built-in defense; a claim about defenses a grid did not run is "not evaluable").
PAPER_CLAIMS: dict = tomllib.loads(resources.files("rapt_audit.reporting").joinpath("paper_claims.toml")
                                   .read_text(encoding="utf-8"))
STATUSES = ("supported", "not supported", "inconclusive", "not evaluable")


@dataclass(frozen=True)
class Difference:
    """``a − b`` of one measure with its 95 % interval, and how the interval was made."""

    label: str
    value: float
    low: float
    high: float
    method: str  # "paired" or "unpaired"

    def text(self) -> str:
        """``η=75, whitebox: pct2t − t2t = +0.012 [−0.020, +0.041] (paired)``."""
        return f"{self.label} = {self.numbers()}"

    def numbers(self) -> str:
        """The text after the label: ``+0.012 [−0.020, +0.041] (paired)``."""
        return f"{self.value:+.3f} [{self.low:+.3f}, {self.high:+.3f}] ({self.method})"


@dataclass(frozen=True)
class Verdict:
    """One claim, its status, a one-line summary and every comparison behind it.

    ``differences`` are the measured differences; ``points`` the Pareto claim's point-by-point lines.
    """

    claim: str
    status: str
    summary: str
    differences: tuple[Difference, ...] = ()
    points: tuple[str, ...] = ()


@dataclass(frozen=True)
class Measured:
    """A row's measure: its estimate (a single run's own, several seeds' combined) and, for a paired comparison,
    its per-seed measures (:mod:`rapt_audit.reporting.paired_rows`; None where a run kept no per-record parts)."""

    estimate: Callable[[Row], Estimate | None]
    per_seed: Callable[[Row], Mapping[int, Measure] | None]

    def __call__(self, row: Row) -> Estimate | None:
        return self.estimate(row)


def difference(a: Row, b: Row, measure: Measured, label: str) -> Difference | None:
    """``measure(a) − measure(b)`` with its 95 % interval (paired where both rows allow it); None if unmeasured.

    Paired: both rows measured at the same seeds, every run with its per-record parts; the hierarchical paired
    bootstrap (:func:`rapt_audit.scoring.hierarchical.paired_difference`: seeds, then each seed's records, drawn
    jointly for both rows). Otherwise from the two intervals as independent (the gate's unpaired rule)."""
    ea, eb = measure(a), measure(b)
    if ea is None or eb is None:
        return None
    ma, mb = measure.per_seed(a), measure.per_seed(b)
    if ma is not None and mb is not None and ma and set(ma) == set(mb):
        return paired(label, ma, mb, ea.value - eb.value)
    return Difference(label, *unpaired_interval(ea, eb), "unpaired")


def paired(label: str, a: Mapping[int, Measure], b: Mapping[int, Measure], value: float | None = None) -> Difference:
    """``a − b`` (seed → measure, the same seeds) with its hierarchical paired 95 % interval (seeded by the label),
    reported at ``value`` (default: the mean of the per-seed differences); the interval always holds the value."""
    return Difference(label, *paired_interval(a, b, seed=seed_of(label), value=value), "paired")


def _utility_estimate(row: Row) -> Estimate | None:
    return row.runs[0].result.utility.get("accuracy") if len(row.runs) == 1 else row.utility.get("accuracy")


#: The row's task accuracy: a single run's own estimate, several seeds' combined one.
utility_of = Measured(_utility_estimate, lambda row: utility_measures(row, "accuracy"))


def privacy_of(attack: str) -> Measured:
    """``row → empirical privacy of attack`` (None where it was skipped, failed or not run); a single run's own
    estimate, several seeds' combined one."""
    def estimate(row: Row) -> Estimate | None:
        outcome = row.runs[0].result.attacks.get(attack) if len(row.runs) == 1 else row.privacy.get(attack)
        if isinstance(outcome, AttackResult):
            return outcome.empirical_privacy
        return outcome if isinstance(outcome, Estimate) else None  # skipped, failed or not run
    return Measured(estimate, lambda row: privacy_measures(row, attack, row.headline.get(attack, "empirical_privacy")))


def attacks_of(group: Group) -> list[str]:
    """The group's measured attacks, less the baselines (random guessing says nothing about a defense) and the
    audit estimators (mutual information is no adversary's success)."""
    load_plugins()
    return [a for a in group.measured_attacks
            if a not in ATTACKS or not {"baseline", "estimator"} & set(ATTACKS.entry(a).tags)]


def _eta(row: Row) -> float | None:
    """η of a row set by η (not by a replacement target), else None."""
    value = row.privacy_level
    return value if row.params.get("replacement") is None and not math.isnan(value) else None


def _others(row: Row, *ignored: str) -> str:
    """The row's parameters but η (and ``ignored``), as one comparable string."""
    skip = {"eta", "replacement", *ignored}
    return params_json({k: v for k, v in row.params.items() if k not in skip})


def _pairs(group: Group, a: str, b: str, *, finite: bool = False) -> list[tuple[Row, Row, str]]:
    """Rows of defenses ``a`` and ``b`` at the same η (label ``η=…``; several settings of one defense: each)."""
    out = []
    for ra in (r for r in group.rows if r.defense == a and _eta(r) is not None):
        for rb in (r for r in group.rows if r.defense == b and _eta(r) == _eta(ra)):
            if finite and math.isinf(_eta(ra)):
                continue
            out.append((ra, rb, f"η={_eta(ra):g}" + (f" ({ra.setting} / {rb.setting})" if "," in ra.setting else "")))
    return out


def _judge(claim: str, diffs: Sequence[Difference], *, ok: Callable[[Difference], bool],
           against: Callable[[Difference], bool], what: str) -> Verdict:
    if not diffs:
        return Verdict(claim, "not evaluable", "the results hold no comparison for this claim")
    good, bad = sum(map(ok, diffs)), sum(map(against, diffs))
    status = "not supported" if bad else "supported" if good == len(diffs) else "inconclusive"
    return Verdict(claim, status, f"{what} in {good} of {len(diffs)} comparisons; against it in {bad}", tuple(diffs))


def privacy_rises(groups: Sequence[Group]) -> Verdict:
    """Privacy rises as η falls: each lower η against the next higher one, for every defense setting and attack."""
    diffs = []
    for group in groups:
        series: dict[tuple[str, str], list[Row]] = {}
        for row in group.rows:
            if _eta(row) is not None and not capabilities_of(row.defense).reference:
                series.setdefault((row.defense, _others(row)), []).append(row)
        for (defense, _), rows in series.items():
            rows.sort(key=lambda r: -_eta(r))  # ∞ first
            for attack in attacks_of(group):
                for high, low in zip(rows, rows[1:]):
                    label = f"{defense}, {attack}: η={_eta(low):g} − η={_eta(high):g}"
                    d = difference(low, high, privacy_of(attack), label)
                    diffs += [d] if d is not None else []
    return _judge("privacy rises as η falls", diffs, ok=lambda d: d.low > 0, against=lambda d: d.high < 0,
                  what="significantly higher at the lower η")


def equally_private(groups: Sequence[Group], a: str, b: str) -> Verdict:
    """``a`` and ``b`` equally private at the same η, within :data:`EQUIVALENCE_MARGIN`, for every attack."""
    m = EQUIVALENCE_MARGIN
    diffs = []
    for g in groups:
        attacks = attacks_of(g)
        diffs += [d for ra, rb, label in _pairs(g, a, b) for attack in attacks
                  if (d := difference(ra, rb, privacy_of(attack), f"{label}, {attack}: {a} − {b}")) is not None]
    return _judge(f"{b.upper()} ≈ {a.upper()} in privacy (margin ±{m:g})", diffs,
                  ok=lambda d: -m <= d.low and d.high <= m, against=lambda d: d.low > m or d.high < -m,
                  what=f"interval inside ±{m:g}")


def _utility_diffs(groups: Sequence[Group], a: str, b: str) -> list[Difference]:
    """``a``'s accuracy minus ``b``'s at each common finite η."""
    return [d for g in groups for ra, rb, label in _pairs(g, a, b, finite=True)
            if (d := difference(ra, rb, utility_of, f"{label}: {a} − {b}")) is not None]


def utility_higher(groups: Sequence[Group], a: str, b: str) -> Verdict:
    """``a``'s accuracy higher than ``b``'s at each common finite η."""
    diffs = _utility_diffs(groups, a, b)
    return _judge(f"{a.upper()} > {b.upper()} in utility", diffs, ok=lambda d: d.low > 0,
                  against=lambda d: d.high < 0, what="significantly higher")


def utility_not_lower(groups: Sequence[Group], a: str, b: str) -> Verdict:
    """``a``'s accuracy not lower than ``b``'s (by :data:`NON_INFERIORITY_MARGIN`) at each common finite η."""
    m = NON_INFERIORITY_MARGIN
    diffs = _utility_diffs(groups, a, b)
    return _judge(f"{a.upper()} ≥ {b.upper()} in utility (margin {m:g})", diffs, ok=lambda d: d.low >= -m,
                  against=lambda d: d.high < -m, what=f"interval above −{m:g}")


def reconstruction_helps(groups: Sequence[Group], defense: str) -> Verdict:
    """``defense`` with its reconstruction head against itself without it, same η and other settings."""
    diffs = []
    for group in groups:
        rapt = [r for r in group.rows if r.defense == defense and _eta(r) is not None]
        for on in (r for r in rapt if r.params.get("reconstruction", True) is True):
            for off in (r for r in rapt if r.params.get("reconstruction") is False and _eta(r) == _eta(on)
                        and _others(r, "reconstruction") == _others(on, "reconstruction")):
                d = difference(on, off, utility_of, f"η={_eta(on):g}: with − without reconstruction")
                diffs += [d] if d is not None else []
    return _judge("the reconstruction head helps utility", diffs, ok=lambda d: d.low > 0,
                  against=lambda d: d.high < 0, what="significantly higher with it")


def pareto_dominates(groups: Sequence[Group], winner: str, others: Sequence[str]) -> Verdict:
    """Every setting of ``others`` is matched or beaten in both utility and privacy by some ``winner`` setting."""
    claim = f"{winner.upper()} Pareto-dominates {' and '.join(o.upper() for o in others)}"
    checked, beaten, lines = 0, 0, []
    for group in groups:
        mine = [r for r in group.rows if r.defense == winner]
        for attack in attacks_of(group):
            measure = privacy_of(attack)
            points = [(utility_of(r), measure(r)) for r in mine]
            points = [(u.value, p.value) for u, p in points if u is not None and p is not None]
            for row in (r for r in group.rows if r.defense in others):
                u, p = utility_of(row), measure(row)
                if u is None or p is None or not points:
                    continue
                checked += 1
                won = any(pu >= u.value and pp >= p.value for pu, pp in points)
                beaten += won
                lines.append(f"{row.defense} {row.setting}, {attack}: utility {u.value:.3f}, privacy {p.value:.3f} — "
                             f"{'dominated' if won else 'not dominated'} by a {winner} setting")
    if not checked:
        return Verdict(claim, "not evaluable", f"no attack measured both {winner} and "
                       f"{' or '.join(others)} with utility in one comparable group")
    status = "supported" if beaten == checked else "not supported"
    return Verdict(claim, status, f"dominated in {beaten} of {checked} (setting, attack) points", points=tuple(lines))


def attack_as_strong(groups: Sequence[Group], strong: str = "bayes_inversion",
                     weak: str = "mlp_inversion") -> Verdict:
    """``strong`` at least as strong as ``weak``: its content privacy not higher, by :data:`NON_INFERIORITY_MARGIN`,
    at every private setting where both ran; paired, since both attacks guess the same victim records.

    Against it: ``strong`` significantly weaker at some setting (the interval of its privacy minus ``weak``'s above
    zero: "within noise" is the issue's test, so no margin helps it there). No-privacy rows are left out: the
    claim is about what an attacker recovers from a privatized release."""
    m = NON_INFERIORITY_MARGIN
    diffs = []
    for group in groups:
        for row in (r for r in group.rows if not r.no_privacy):
            a, b = attack_metric_measures(row, strong, MEASURE), attack_metric_measures(row, weak, MEASURE)
            if not a or not b or set(a) != set(b):
                continue  # one of them did not run here, or kept no per-record parts: nothing to pair
            diffs.append(paired(f"{row.defense} {row.setting}, {MEASURE}: {strong} − {weak}", a, b))
    return _judge(f"{strong} at least as strong as {weak} (margin {m:g})", diffs, ok=lambda d: d.high <= m,
                  against=lambda d: d.low > 0, what=f"privacy under {strong} not higher (interval below +{m:g})")


def evaluate(groups: Sequence[Group]) -> list[Verdict]:
    """Every claim of the module docstring, in that order, about the defenses :data:`PAPER_CLAIMS` names."""
    c = PAPER_CLAIMS
    return [privacy_rises(groups), equally_private(groups, **c["equally_private"]),
            utility_higher(groups, **c["utility_higher"]), utility_not_lower(groups, **c["utility_not_lower"]),
            reconstruction_helps(groups, **c["reconstruction_helps"]), pareto_dominates(groups, **c["pareto_dominates"]),
            attack_as_strong(groups)]


def judge(results: Sequence[Loaded]) -> list[Verdict]:
    """Every claim judged on stored results, their rows grouped as every table groups them
    (:func:`~rapt_audit.reporting.summary.group_results`): the one entry of ``rapt-audit claims`` and of a benchmark's
    ``claims.md`` (handed a benchmark's joined results, :mod:`rapt_audit.benchmark.claims`)."""
    return evaluate(group_results(results))


def format_json(verdicts: Sequence[Verdict]) -> str:
    """The verdicts as JSON (``rapt-audit claims --format json``): each claim, status, summary and comparison."""
    return json.dumps([asdict(v) for v in verdicts], indent=2) + "\n"


def format_markdown(verdicts: Sequence[Verdict]) -> str:
    """A table of claims and verdicts, then every comparison behind each.

    The claims, statuses and summaries are this module's own text; the comparisons' labels and the
    Pareto points name defenses, settings and attacks from result files, each escaped as literal
    Markdown text (:func:`~rapt_audit.reporting.markdown.markdown_text`).
    """
    t = markdown_text
    lines = ["| claim | verdict | summary |", "|---|---|---|"]
    lines += [f"| {v.claim} | **{v.status}** | {v.summary} |" for v in verdicts]
    for v in verdicts:
        if v.differences or v.points:
            lines += ["", f"**{v.claim}** ({v.status}):", ""]
            lines += [f"- {t(d.label)} = {d.numbers()}" for d in v.differences] + [f"- {t(p)}" for p in v.points]
    return "\n".join(lines) + "\n"


__all__ = ["EQUIVALENCE_MARGIN", "NON_INFERIORITY_MARGIN", "Difference", "Verdict", "attack_as_strong", "difference",
           "evaluate", "format_json", "format_markdown", "judge", "paired"]

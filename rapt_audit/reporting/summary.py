"""Results → comparable groups → one row per defense setting (shared by reports and leaderboards).

Results are grouped by their comparability ``signature`` (data, splits, model, profile, attack
settings, version) and never mixed across groups. Inside a group, results of the same defense with
the same resolved parameters are one *row*; several seeds of a row are combined into a mean with a
t-interval across seeds (:func:`rapt_audit.scoring.stats.seed_summary`), one seed keeps its own interval.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from rapt_audit.api.plugins import ATTACKS, WORST_CASE, capabilities_of, load as load_plugins
from rapt_audit.api.types import AttackFailure, Estimate, Skip
from rapt_audit.pipeline.config import settings_id
from rapt_audit.pipeline.tidy import setting_key
from rapt_audit.reporting.collect import Loaded
from rapt_audit.reporting.freshness import fresh_results
from rapt_audit.reporting.table_render import estimate_text
from rapt_audit.scoring.metrics import declared, headline_metric
from rapt_audit.scoring.stats import seed_summary

#: Privacy parameters and how they are written in tables and plots, in order of preference.
PRIVACY_PARAMS = (("replacement", "p"), ("eta", "η"), ("epsilon", "ε"))


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value.strip().lower() in {"inf", "+inf", "infinity"}:
        return math.inf
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


_UNSAFE_ID = re.compile(r"[^A-Za-z0-9_-]")


def safe_id(name: str) -> str:
    """``name`` as an HTML id part and file-name stem: ``[A-Za-z0-9_-]`` only, whatever a result file holds.

    A clean name is kept as it is (stable links and file names); any other gets its unsafe characters
    replaced and a hash of the original appended, so two names never share an id (``a b`` and ``a-b``).
    """
    cleaned = _UNSAFE_ID.sub("-", name)
    if cleaned == name and name:
        return name
    return f"{cleaned}-{hashlib.sha256(name.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"


class DuplicateRunWarning(UserWarning):
    """Two result files hold one run (the same settings, however spelled, under one signature): counted once."""


def _fmt(value: float) -> str:
    return "∞" if math.isinf(value) else f"{value:g}"


@dataclass
class Row:
    """One defense setting inside a comparable group, all its seeds combined."""

    signature: str
    defense: str
    params: dict[str, Any]
    runs: list[Loaded]
    setting: str = ""
    utility: dict[str, Estimate] = field(default_factory=dict)
    privacy: dict[str, Estimate | Skip | AttackFailure] = field(default_factory=dict)
    metrics: dict[str, dict[str, Estimate]] = field(default_factory=dict)
    #: Attack → the declared measure its headline is (:func:`~rapt_audit.scoring.metrics.headline_metric`).
    headline: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """The setting's :func:`~rapt_audit.pipeline.tidy.setting_key` (the same for all its runs)."""
        return setting_key(self.runs[0].result)

    @property
    def seeds(self) -> list[int]:
        """The run seeds combined in this row."""
        return sorted({int(r.result.config.get("seed", 0)) for r in self.runs})

    @property
    def synthetic(self) -> bool:
        """Whether any run of the row used the synthetic demo corpus."""
        return any(r.result.synthetic for r in self.runs)

    @property
    def release_meta(self) -> dict[str, Any]:
        """The release facts of the first run (η in force, observed replacement probability...)."""
        return dict(self.runs[0].result.defense.get("release_meta", {}))

    @property
    def unchanged_share(self) -> float | None:
        """Share of units a text defense released unchanged (first run; ``None`` for other defenses)."""
        value = (self.release_meta.get("verbatim") or {}).get("units_unchanged_share")
        return None if value is None else float(value)

    @property
    def pretraining(self) -> str | None:
        """``denoise MLM, 150 steps on wikitext2`` when the service pretrained its encoder (first run), else None."""
        customization = self.release_meta.get("customization")
        record = customization.get("pretraining") if isinstance(customization, dict) else None
        if not isinstance(record, dict) or not record:
            return None
        settings = record.get("settings")
        steps = settings.get("steps", "?") if isinstance(settings, dict) else "?"
        return f"{record.get('objective')} MLM, {steps} steps on {record.get('corpus')}"

    @property
    def entities_verbatim(self) -> tuple[int, int] | None:
        """``(verbatim, found)``: named entities of the original text that the release carries verbatim
        (spaCy's, all types; first run), or ``None`` when the result does not count them."""
        verbatim = self.release_meta.get("verbatim")
        entities = verbatim.get("entities") if isinstance(verbatim, dict) else None
        if not isinstance(entities, dict) or not entities:
            return None
        counts = [(c.get("verbatim"), c.get("found")) for c in entities.values() if isinstance(c, dict)]
        if not counts or not all(isinstance(v, int) and isinstance(f, int) for v, f in counts):
            return None
        return sum(v for v, _ in counts), sum(f for _, f in counts)

    @property
    def privacy_level(self) -> float:
        """The numeric privacy parameter for ordering (η or ε; ``inf`` = none; NaN if unknown)."""
        for key in ("eta", "epsilon"):
            value = _num(self.release_meta.get(key, self.params.get(key)))
            if value is not None:
                return value
        return math.nan

    @property
    def no_privacy(self) -> bool:
        """The no-privacy reference (:func:`is_reference`), or η = ∞ / ε = ∞ with no replacement target."""
        if is_reference(self.defense):
            return True
        return self.params.get("replacement") is None and math.isinf(self.privacy_level)

    @property
    def anchor(self) -> str:
        """A stable HTML id for the row (leaderboard links point at it)."""
        raw = json.dumps([self.signature, self.defense, self.params], sort_keys=True, default=str)
        # The name comes from a result file, which anyone can write: only [A-Za-z0-9_-] reach the id.
        safe = _UNSAFE_ID.sub("-", self.defense)
        return f"row-{safe}-{hashlib.sha256(raw.encode('utf-8')).hexdigest()[:10]}"


@dataclass
class Group:
    """All rows that share one comparability signature."""

    signature: str
    rows: list[Row]

    @property
    def first(self) -> Any:
        """A representative result (dataset, splits, profile are the same for every row)."""
        return self.rows[0].runs[0].result

    @property
    def utility_metrics(self) -> list[str]:
        """Utility metric names present in the group, in first-seen order."""
        return list(dict.fromkeys(m for r in self.rows for m in r.utility))

    @property
    def attacks(self) -> list[str]:
        """Attack names present in the group, in first-seen order; the worst case over the inversion attacks
        (:mod:`rapt_audit.scoring.worst_case`) first, as the headline privacy."""
        names = list(dict.fromkeys(a for r in self.rows for a in r.privacy))
        return sorted(names, key=lambda name: (name != WORST_CASE, is_estimator(name)))

    @property
    def measured_attacks(self) -> list[str]:
        """Attacks measured in at least one row (the others were skipped everywhere)."""
        return [a for a in self.attacks if any(not isinstance(r.privacy.get(a), Skip) for r in self.rows)]

    @property
    def skipped_attacks(self) -> dict[str, str]:
        """Attacks skipped in every row, with the first row's reason."""
        measured = set(self.measured_attacks)
        return {a: next(r.privacy[a] for r in self.rows if a in r.privacy).reason  # type: ignore[union-attr]
                for a in self.attacks if a not in measured}

    def headline(self, attack: str) -> str:
        """The declared measure ``attack``'s headline is here: ``empirical_privacy`` or the attack's own."""
        return next((r.headline[attack] for r in self.rows if attack in r.headline), "empirical_privacy")

    def measure_note(self, attack: str) -> str | None:
        """What ``attack``'s headline is when it is not 1 − attack success (``None`` when it is): a chance-
        normalised attribute privacy, or a measure outside [0, 1] such as a reconstruction MSE (said so)."""
        name = self.headline(attack)
        found = declared(name)
        if name == "empirical_privacy" or found is None:
            return None
        return f"{name}: {found.description}" + ("" if found.bounded else " (not in [0, 1])")

    @property
    def anchor(self) -> str:
        """A stable HTML id for the group."""
        return "group-" + hashlib.sha256(self.signature.encode("utf-8")).hexdigest()[:10]


def is_local_baseline(defense: str) -> bool:
    """Whether ``defense`` is a local-only baseline (declares ``local_only``: the client alone, releasing nothing): a
    utility reference drawn on every utility axis and compared with every defense, never a privacy candidate."""
    return capabilities_of(defense).local_only


def is_reference(defense: str) -> bool:
    """Whether ``defense`` is the no-privacy reference (declares ``reference``): the ceiling every target is a share
    of, shown for reference and never named best."""
    return capabilities_of(defense).reference


def is_estimator(attack: str) -> bool:
    """Whether ``attack`` is an audit estimator (tagged ``estimator``: ``mutual_info``) rather than an adversary:
    it is reported after the attacks, marked so, and left out of the worst case and of the claims."""
    load_plugins()
    return attack in ATTACKS and "estimator" in ATTACKS.entry(attack).tags


def _combine(estimates: Sequence[Estimate], metric: str) -> Estimate:
    # A metric declared bounded (accuracy, token accuracy, 1 − attack success, a per-attribute
    # attribute_privacy.gender) keeps its seed interval inside [0, 1]; an unbounded headline
    # (ae_inversion's reconstruction MSE) is never clipped.
    found = declared(metric)
    return seed_summary(list(estimates), bounds=(0.0, 1.0) if found is not None and found.bounded else None)


def _fill(row: Row) -> None:
    results = [r.result for r in row.runs]
    for name in dict.fromkeys(m for res in results for m in res.utility):
        values = [res.utility[name] for res in results if name in res.utility]
        row.utility[name] = _combine(values, name)
    for attack in dict.fromkeys(a for res in results for a in res.attacks):
        outcomes = [res.attacks.get(attack) for res in results]
        failed = [o for o in outcomes if isinstance(o, AttackFailure)]
        if failed:  # never a number from the seeds that ran: the row is incomplete
            seeds = f" (failed in {len(failed)} of {len(outcomes)} seeds)" if len(outcomes) > 1 else ""
            row.privacy[attack] = AttackFailure(failed[0].message + seeds)
            continue
        measured = [o for o in outcomes if o is not None and not isinstance(o, Skip)]
        if not measured:
            row.privacy[attack] = next((o for o in outcomes if isinstance(o, Skip)), Skip("not run"))
            continue
        row.headline[attack] = headline_metric(measured[0].metrics, measured[0].empirical_privacy)
        row.privacy[attack] = _combine([o.empirical_privacy for o in measured], row.headline[attack])
        names = dict.fromkeys(m for o in measured for m in o.metrics)
        row.metrics[attack] = {m: _combine([o.metrics[m] for o in measured if m in o.metrics], m) for m in names}


def _label(row: Row, varying: Iterable[str]) -> str:
    meta = row.release_meta
    parts = []
    target = row.params.get("replacement")
    if target is not None:
        eta, p = _num(meta.get("eta")), _num(target)
        parts.append(f"p={target if p is None else format(p, 'g')}" + (f" (η={eta:.3g})" if eta is not None else ""))
    else:
        for key, symbol in PRIVACY_PARAMS[1:]:
            value = _num(row.params.get(key))
            if value is not None:
                parts.append(f"{symbol}={_fmt(value)}")
                break
    # A local-only baseline is named by what the client holds (its head's settings are fixed, the same for all).
    if is_local_baseline(row.defense) and "client" in row.params:
        return ", ".join([f"client={row.params['client']}"] + [f"{k}={row.params[k]}" for k in varying if k != "client"])
    # A defense without η, ε or a replacement target (a plugin's ``p``, ``sigma``...) is labelled by the values of
    # its own parameters, in their order, even where they are its defaults: "default" said nothing comparable.
    own = _own_parameters(row.params) if not parts and not is_reference(row.defense) else []
    parts += [f"{k}={_value_text(row.params[k])}" for k in own if row.params[k] is not None or k in varying]
    parts += [f"{k}={row.params[k]}" for k in varying if k in row.params and k not in own]
    return ", ".join(parts) or ("no privacy" if is_reference(row.defense) else "default")


#: The first of the service's customization settings (``method``, ``epochs``, ...): a result lists a defense's
#: parameters in :func:`rapt_audit.api.params.parameter_fields` order, its own first and a parameter group's (the
#: service's) after them, so the parameters before this one are the defense's own.
_SERVICE_FIRST = "method"


def _own_parameters(params: dict[str, Any]) -> list[str]:
    """The defense's own parameters among a result's ``params`` (read from the result alone, so that a report
    labels a plugin's rows the same on a machine without the plugin)."""
    names = list(params)
    return names[:names.index(_SERVICE_FIRST)] if _SERVICE_FIRST in names else names


def _value_text(value: Any) -> str:
    """A parameter's value in a label: numbers as ``%g`` (``0.3``, not ``0.30000000000000004``), others as is."""
    number = None if isinstance(value, str) else _num(value)
    return str(value) if number is None else _fmt(number)


def group_results(loaded: Sequence[Loaded]) -> list[Group]:
    """Group results by signature, then into one row per defense setting (seeds combined).

    One run counts once, never as two seeds: results of one signature whose stored settings are one cell
    (recomputed canonically, :func:`~rapt_audit.pipeline.config.settings_id`, so ``eta=1e2`` and the default
    η = 100 are one, whatever ``cell_id`` each file recorded) keep the first read; a copy in another file is
    named in a :class:`DuplicateRunWarning`. Results that other code measured than the rest of their table are
    left out of it, with a warning (:func:`~rapt_audit.reporting.freshness.fresh_results`). Groups are ordered
    by signature; rows by defense name, then by privacy parameter (most noise first, ∞ last).
    """
    load_plugins()  # plugins declare their metrics (and whether they are bounded) when imported
    loaded = fresh_results(loaded)
    by_sig: dict[str, dict[str, Row]] = {}
    seen: dict[tuple[str, str], Loaded] = {}
    for item in loaded:
        res = item.result
        first = seen.setdefault((res.signature, settings_id(res.config)), item)
        if first is not item:
            if first.path != item.path:  # the same file given twice is no news
                warnings.warn(f"{item.path} holds the same run as {first.path} (one setting, seed "
                              f"{res.config.get('seed')}, profile {res.config.get('profile')}): counted once, as "
                              f"{first.path}; give each run once", DuplicateRunWarning, stacklevel=2)
            continue
        key = setting_key(res)
        rows = by_sig.setdefault(res.signature, {})
        if key not in rows:
            rows[key] = Row(res.signature, str(res.defense.get("name")), dict(res.defense.get("params", {})), [])
        rows[key].runs.append(item)
    groups = []
    for sig in sorted(by_sig):
        rows = list(by_sig[sig].values())
        for row in rows:
            _fill(row)
        for defense in {r.defense for r in rows}:
            same = [r for r in rows if r.defense == defense]
            keys = {k for r in same for k in r.params if k not in {"eta", "epsilon", "replacement"}}
            varying = sorted(k for k in keys if len({json.dumps(r.params.get(k), default=str) for r in same}) > 1)
            for r in same:
                r.setting = _label(r, varying)
        rows.sort(key=lambda r: (r.defense, _sort_level(r.privacy_level), r.setting))
        groups.append(Group(sig, rows))
    return groups


def _sort_level(value: float) -> float:
    return math.inf if math.isnan(value) else value


def fmt_estimate(est: Estimate, digits: int = 3) -> str:
    """``0.812 [0.771, 0.850]``: an estimate as every table says it (:func:`~rapt_audit.reporting.table_render.
    estimate_text`)."""
    return " ".join(estimate_text(est, digits=digits))


__all__ = ["PRIVACY_PARAMS", "DuplicateRunWarning", "Group", "Row", "fmt_estimate", "group_results", "is_local_baseline",
           "is_reference", "safe_id"]

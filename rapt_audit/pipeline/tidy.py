"""Results as tidy tables: one row per result × measure, for pandas users and for the reports' grouping.

A measure is a utility metric (``kind="utility"``), an attack's headline empirical privacy
(``kind="privacy"``, ``measure="empirical_privacy"``) or one of an attack's own metrics
(``kind="attack_metric"``, e.g. ``token_accuracy``). A skipped attack keeps its row: ``value`` is
NaN and ``skipped`` holds the reason, so a table never silently loses the pairs that did not run; an
attack that failed (raised, or broke its contract) likewise, with its message in ``failed``.

:func:`setting_key` is the one definition of "the same defense setting" (name and resolved
parameters): the report and leaderboard rows (:func:`rapt_audit.reporting.summary.group_results`)
and the frames use it alike, so a DataFrame group and a report row hold the same runs.

pandas is imported only when a frame is built (``rapt-audit --help`` must not pay for it).
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Protocol, Sequence

from rapt_audit.api.plugins import load_named
from rapt_audit.api.types import AttackFailure, Estimate, Skip
from rapt_audit.scoring.metrics import declared

if TYPE_CHECKING:
    import pandas as pd

#: The fixed columns of a tidy frame, in order; one ``param.<name>`` column per defense parameter follows.
COLUMNS = ("signature", "dataset", "synthetic", "profile", "model", "defense", "setting_key", "params",
           "seed", "kind", "attack", "measure", "value", "ci_low", "ci_high", "n", "ci_method", "level",
           "higher_is_better", "skipped", "failed", "cell_id", "git_sha", "version", "started_at", "wall_time_s",
           "path")

#: Prefix of the per-parameter columns (``param.eta``, ``param.method``...).
PARAM_PREFIX = "param."


class ResultView(Protocol):
    """What a tidy row reads of a run's result.

    :class:`rapt_audit.pipeline.results.RunResult` has these members; it is named by this protocol
    because results.py builds its frames through this module, which therefore cannot import it back.
    """

    signature: str
    cell_id: str
    config: Mapping[str, Any]
    dataset: Mapping[str, Any]
    defense: Mapping[str, Any]
    utility: Mapping[str, Estimate]
    attacks: Mapping[str, Any]
    env: Mapping[str, Any]

    @property
    def synthetic(self) -> bool:
        """Whether the run used the synthetic demo corpus."""


def params_json(params: Mapping[str, Any]) -> str:
    """Defense parameters as canonical JSON (the ``params`` column)."""
    return json.dumps(dict(params), sort_keys=True, default=str)


def setting_key(result: ResultView) -> str:
    """The defense setting of ``result`` as a canonical string: its name and resolved parameters.

    Two results with equal keys (and equal signatures) are seeds of one setting: the report shows
    them as one row and :func:`rapt_audit.reporting.frames.summarize` combines them.
    """
    return json.dumps([result.defense.get("name"), dict(result.defense.get("params", {}))],
                      sort_keys=True, default=str)


def setting_columns(result: ResultView) -> dict[str, Any]:
    """The cells that name a result's comparable group and defense setting: signature, dataset, profile,
    model, defense, setting_key, params (JSON) and one ``param.<name>`` cell per defense parameter."""
    params = dict(result.defense.get("params", {}))
    return {"signature": result.signature, "dataset": result.dataset.get("name"),
            "profile": result.config.get("profile"), "model": result.config.get("model"),
            "defense": result.defense.get("name"), "setting_key": setting_key(result), "params": params_json(params),
            **{PARAM_PREFIX + k: cell_value(v) for k, v in params.items()}}


def _direction(measure: str) -> bool | None:
    """Whether a higher value is better for the defender, as the metric's declaration says (None if undeclared).

    A per-variant name (``attribute_privacy.gender``) reads its base's declaration."""
    found = declared(measure)
    return None if found is None else found.higher_is_better


def cell_value(value: Any) -> Any:
    """A parameter value as a frame cell: numbers and strings as they are, anything else as JSON."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def estimate_cells(est: Estimate | None) -> dict[str, Any]:
    """An estimate as the frame's value, ci_low, ci_high, n, ci_method and level cells (NaN / 0 / None for none)."""
    if est is None:
        return {"value": math.nan, "ci_low": math.nan, "ci_high": math.nan, "n": 0, "ci_method": None,
                "level": math.nan}
    return {"value": est.value, "ci_low": est.ci_low, "ci_high": est.ci_high, "n": est.n,
            "ci_method": est.method, "level": est.level}


def tidy_records(result: ResultView, *, path: str | None = None) -> list[dict[str, Any]]:
    """The tidy rows of one result (dicts with :data:`COLUMNS` plus ``param.<name>`` keys).

    Args:
        result: A run's result.
        path: The file it was read from, recorded in the ``path`` column (``None`` for a fresh run).
    """
    load_named(str(result.config.get("defense", "")), result.attacks)  # they declare their metrics when imported
    env = result.env
    common: dict[str, Any] = {
        **setting_columns(result), "synthetic": result.synthetic, "seed": result.config.get("seed"),
        "cell_id": result.cell_id, "git_sha": env.get("git_sha"),
        "version": (env.get("versions") or {}).get("rapt-audit"), "started_at": env.get("started_at"),
        "wall_time_s": env.get("wall_time_s"), "path": path}

    rows = []

    def add(kind: str, attack: str | None, measure: str, est: Estimate | None, skipped: str | None = None,
            failed: str | None = None) -> None:
        rows.append({**common, "kind": kind, "attack": attack, "measure": measure, **estimate_cells(est),
                     "higher_is_better": _direction(measure), "skipped": skipped, "failed": failed})

    for name, est in result.utility.items():
        add("utility", None, name, est)
    for attack, outcome in result.attacks.items():
        if isinstance(outcome, Skip):
            add("privacy", attack, "empirical_privacy", None, outcome.reason)
            continue
        if isinstance(outcome, AttackFailure):
            add("privacy", attack, "empirical_privacy", None, failed=outcome.message)
            continue
        add("privacy", attack, "empirical_privacy", outcome.empirical_privacy)
        for name, est in outcome.metrics.items():
            add("attack_metric", attack, name, est)
    return rows


def records_frame(records: Iterable[Mapping[str, Any]], columns: Sequence[str] = COLUMNS) -> pd.DataFrame:
    """A DataFrame of rows with ``columns`` first (default :data:`COLUMNS`), then the ``param.*`` columns
    sorted by name, integer and boolean columns nullable.

    An empty input gives an empty frame that still has the fixed columns.
    """
    import pandas as pd  # lazy (pandas)

    records = list(records)
    params = sorted({k for r in records for k in r if k.startswith(PARAM_PREFIX)})
    return typed_frame(pd.DataFrame.from_records(records, columns=list(columns) + params))


def typed_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with nullable integer and boolean columns, so a missing seed or direction stays <NA>
    instead of turning the column into floats or objects; parameter columns keep their mixed values."""
    dtypes = {"seed": "Int64", "n": "Int64", "n_seeds": "Int64", "synthetic": "boolean",
              "higher_is_better": "boolean", "no_privacy": "boolean"}
    return frame.astype({c: t for c, t in dtypes.items() if c in frame.columns})


__all__ = ["COLUMNS", "PARAM_PREFIX", "cell_value", "estimate_cells", "params_json", "records_frame", "setting_columns",
           "setting_key", "tidy_records", "typed_frame"]

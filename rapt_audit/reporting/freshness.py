"""One table, one code per component: the stale results of a folder left out, and said so (issue #62 item 3).

A result records a digest per component (``env.code``: the core, its defense, each attack) and its signature's
``code:`` is the digest of the core and the attacks, a table's columns. Results whose signatures differ only in
``code:`` would sit in two tables; they are one table, drawn from one *reference* code:

* of the table (core and attacks): the code here where some result of the table was measured by it, else the
  newest result's (``env.started_at``);
* then of each defense's rows (``env.code.defense``, one per row): the code here for that defense where some of
  its results carry it, else its newest result's.

Everything else is left out, and one :class:`StaleRunWarning` says how many results, of which code, and the
command that measures them again (a re-run measures only their stale stages). A result signed before
per-component digests is one component, its single ``code:`` (:data:`~rapt_audit.api.components.ALL`): it
matches the code here only when that is the package's digest here.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Callable, Sequence

from rapt_audit.pipeline.results import RunResult
from rapt_audit.pipeline.stage_reuse import recorded_here, stored_code
from rapt_audit.reporting.collect import Loaded

_CODE_FIELD = re.compile(r"\|code:[0-9a-f]+")
#: The file a benchmark folder holds (``benchmark.run.INDEX_FILE``; reporting may not import ``benchmark``).
_BENCHMARK_INDEX, _BENCHMARK_FILE = "benchmark.json", "benchmark.toml"


class StaleRunWarning(UserWarning):
    """Results another code measured than the rest of their table: left out of it."""


def table_key(signature: str) -> str:
    """A signature less its ``code:`` fields (a joined benchmark signature has one per dataset): results of one
    key belong in one table."""
    return _CODE_FIELD.sub("", signature)


def table_is_here(res: RunResult) -> bool:
    """Whether the code here has the core and the attacks that measured ``res`` (for a result of one digest: all
    of it)."""
    code, here = stored_code(res), recorded_here(res)
    if code.legacy:
        return not code.stale(here)
    return code.core == here.core and all(here.attacks.get(n) == d for n, d in code.attacks.items())


def _defense_is_here(res: RunResult) -> bool:
    """Whether the code here has the defense that measured ``res`` (for a result of one digest: all of it)."""
    code = stored_code(res)
    return not code.stale(recorded_here(res)) if code.legacy else code.defense == recorded_here(res).defense


def _defense_code(res: RunResult) -> str:
    code = stored_code(res)
    return f"code:{code.legacy[:8]}" if code.legacy else code.defense


def reference(results: Sequence[RunResult], code_of: Callable[[RunResult], str],
              is_here: Callable[[RunResult], bool] = table_is_here) -> set[str]:
    """The reference codes (by ``code_of``) among ``results``: those of the results the code here measured
    (``is_here``), else the newest result's (``env.started_at``)."""
    here = {code_of(r) for r in results if is_here(r)}
    return here or {code_of(max(results, key=lambda r: str(r.env.get("started_at") or "")))}


def _choose(items: Sequence[Loaded], code_of: Callable[[RunResult], str],
            is_here: Callable[[RunResult], bool]) -> tuple[list[Loaded], list[Loaded]]:
    """``items`` split into those of the reference code (:func:`reference`) and the others."""
    if len({code_of(i.result) for i in items}) < 2:
        return list(items), []
    chosen = reference([i.result for i in items], code_of, is_here)
    return [i for i in items if code_of(i.result) in chosen], [i for i in items if code_of(i.result) not in chosen]


def _rerun_command(folder: Path) -> str:
    """The command that measures a folder's stale results again (only their stale stages run)."""
    if (folder / _BENCHMARK_INDEX).is_file():
        return f"`rapt-audit benchmark run {folder / _BENCHMARK_FILE} --out {folder}`"
    return f"the `rapt-audit run ... --out {folder}` that made them"


def _warn(left: Sequence[tuple[Loaded, str]]) -> None:
    """One warning for every result left out (``(result, what its stale code is)``)."""
    counts: dict[str, int] = {}
    for _, what in left:
        counts[what] = counts.get(what, 0) + 1
    folders = sorted({item.path.parent.parent for item, _ in left}, key=str)
    codes = "; ".join(f"{n} of {what}" for what, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    commands = ", ".join(_rerun_command(f) for f in folders[:3]) + (" and the others'" if len(folders) > 3 else "")
    warnings.warn(f"{len(left)} result(s) left out of their table, measured by other code than its reference (the "
                  f"code here where some result has it, else the newest): {codes}; {commands} measures only their "
                  "stale stages again", StaleRunWarning, stacklevel=4)


def fresh_results(loaded: Sequence[Loaded]) -> list[Loaded]:
    """``loaded`` less the results of another code of a component than their table's reference (see the
    module), in their order; one :class:`StaleRunWarning` names what was left out."""
    tables: dict[str, list[Loaded]] = {}
    for item in loaded:
        tables.setdefault(table_key(item.result.signature), []).append(item)
    kept: list[Loaded] = []
    left: list[tuple[Loaded, str]] = []
    for items in tables.values():
        table, other = _choose(items, lambda r: r.signature, table_is_here)
        left += [(i, f"table code:{stored_code(i.result).shared()} (its core and attacks)") for i in other]
        by_defense: dict[str, list[Loaded]] = {}
        for item in table:
            by_defense.setdefault(str(item.result.defense.get("name")), []).append(item)
        for name, same in by_defense.items():
            rows, other = _choose(same, _defense_code, _defense_is_here)
            kept += rows
            left += [(i, f"defense {name}'s code {_defense_code(i.result)[:16]}") for i in other]
    if left:
        _warn(left)
    order = {id(i): n for n, i in enumerate(loaded)}
    return sorted(kept, key=lambda i: order[id(i)])


__all__ = ["StaleRunWarning", "fresh_results", "reference", "table_is_here", "table_key"]

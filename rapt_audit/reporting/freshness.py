"""One table, one code per component: the stale results of a folder left out, and said so (issue #62 item 3).

Results whose signatures differ only in ``code:`` (the digest of the core and the attacks, a table's columns)
would sit in two tables. They are one table, drawn from the reference code of each component: the code here
where some result was measured by it, otherwise the newest result's (``env.started_at``). Likewise a defense's
rows keep only the results of one digest of that defense (``env.code.defense``). Whatever is left out is
named in one :class:`StaleRunWarning`, with the command that measures it again; nothing is mixed silently.
A result signed before per-component digests is one component (its single ``code:``).
"""

from __future__ import annotations

import re
import warnings
from typing import Callable, Sequence

from rapt_audit.api.components import CellCode, current_code
from rapt_audit.api.plugins import WORST_CASE
from rapt_audit.pipeline.stage_reuse import staleness, stored_code
from rapt_audit.reporting.collect import Loaded

_CODE_FIELD = re.compile(r"\|code:[0-9a-f]+")


class StaleRunWarning(UserWarning):
    """Results another code measured than the rest of their table: left out of it."""


def _table_key(signature: str) -> str:
    """A signature less its ``code:`` fields (a joined benchmark signature has one per dataset)."""
    return _CODE_FIELD.sub("", signature)


def _here(item: Loaded) -> CellCode:
    res = item.result
    return current_code(str(res.defense.get("name")), [n for n in res.attacks if n != WORST_CASE])


def _choose(items: Sequence[Loaded], code_of: Callable[[Loaded], str]) -> tuple[list[Loaded], list[Loaded]]:
    """``items`` split into those of the reference code (by ``code_of``) and the others."""
    codes = {code_of(i) for i in items}
    if len(codes) < 2:
        return list(items), []
    fresh = [i for i in items if not staleness(i.result, _here(i))]
    reference = code_of(fresh[0]) if fresh else code_of(max(items, key=lambda i: str(i.result.env.get("started_at"))))
    return [i for i in items if code_of(i) == reference], [i for i in items if code_of(i) != reference]


def fresh_results(loaded: Sequence[Loaded]) -> list[Loaded]:
    """``loaded`` less the results of a component's other code than its table's reference (see the module);
    one :class:`StaleRunWarning` names how many were left out, of which code, and where."""
    tables: dict[str, list[Loaded]] = {}
    for item in loaded:
        tables.setdefault(_table_key(item.result.signature), []).append(item)
    kept: list[Loaded] = []
    left: list[Loaded] = []
    for items in tables.values():
        table, other = _choose(items, lambda i: i.result.signature)
        left += other
        by_defense: dict[str, list[Loaded]] = {}
        for item in table:
            by_defense.setdefault(str(item.result.defense.get("name")), []).append(item)
        for same in by_defense.values():
            rows, other = _choose(same, lambda i: stored_code(i.result).defense or stored_code(i.result).legacy)
            kept += rows
            left += other
    if left:
        folders = sorted({str(i.path.parent.parent) for i in left})
        codes = sorted({stored_code(i.result).shared() for i in left})
        warnings.warn(f"{len(left)} result(s) measured by other code than the rest of their table (code:"
                      f"{', code:'.join(codes)}) are left out of it, in {', '.join(folders[:3])}"
                      f"{' and more' if len(folders) > 3 else ''}; `rapt-audit benchmark run` (or `run`) into the "
                      "same folder measures their stale stages again", StaleRunWarning, stacklevel=3)
    order = {id(i): n for n, i in enumerate(loaded)}
    return sorted(kept, key=lambda i: order[id(i)])


__all__ = ["StaleRunWarning", "fresh_results"]

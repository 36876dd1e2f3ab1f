"""The report's section on privacy audits (``rapt-audit audit --out DIR/audit-NAME.json``): claim vs lower bound."""

from __future__ import annotations

from html import escape as e
from pathlib import Path
from typing import Any

from rapt_audit.reporting.collect import Collection, relative_path


def _number(value: Any, digits: int) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{float(value):.{digits}f}"
    return e(str(value))  # "inf", null, or whatever else an audit file holds, as text


def audit_docs_html(coll: Collection, base: Path) -> str:
    """One table per audit document: each pair's distance, claim, lower bound, ceiling and verdict."""
    if not coll.audits:
        return ""
    parts = ["<section class='group' id='audits'><h2>Privacy audits</h2><p class='note'>Each lower bound holds at "
             "confidence 1 − α for the whole audit. VIOLATION proves that the mechanism does not deliver its claim; "
             "ok is not a proof of privacy; unauditable means the claim is above what the samples can falsify.</p>"]
    for path, doc in coll.audits:
        claim = doc.get("claim_per_unit_distance") or {}
        setting = ", ".join(f"{e(str(k))} = {e(str(v))}" for k, v in claim.items())
        rows = "".join(
            f"<tr><td>{e(str(p.get('label')))}</td><td>{_number(p.get('distance'), 3)}</td>"
            f"<td>{_number(p.get('claim'), 2)}</td><td>{_number(p.get('lower_bound'), 3)}</td>"
            f"<td>{_number(p.get('ceiling'), 2)}</td><td>{e(str(p.get('verdict')))}</td></tr>"
            for p in doc.get("pairs", []))
        samples = doc.get("samples_per_input", {})
        parts.append(f"<h3>{e(str(doc.get('defense')))}: {e(str(doc.get('verdict')))} "
                     f"<small><code>{e(relative_path(path, base))}</code></small></h3>"
                     f"<p class='note'>{e(str(doc.get('audits', '')))}; {setting}; α = {e(str(doc.get('alpha')))}; "
                     f"{e(str(samples.get('select')))} + {e(str(samples.get('evaluate')))} releases per input; "
                     f"seed {e(str(doc.get('seed')))}.</p>"
                     "<table><thead><tr><th>pair</th><th>d(x, x′)</th><th>claim</th><th>ε lower bound</th>"
                     f"<th>ceiling</th><th>verdict</th></tr></thead><tbody>{rows}</tbody></table>")
    parts.append("</section>")
    return "\n".join(parts)

"""``rapt-audit run --dry-run``: check a run or a sweep exactly as it would start, print its plan.

The check is the runner's own :func:`~rapt_audit.pipeline.runner.plan` (plugins built with checked
parameters, the attack selection, the dataset loaded and split, the output directory inspected), so
a configuration that passes here fails later only on what needs the model or training. Nothing is
trained, privatized or written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from rapt_audit.api.params import get_params
from rapt_audit.pipeline import runner, stage_reuse
from rapt_audit.pipeline.contracts import unreadable_release
from rapt_audit.pipeline.sweep import Cell

FOOTER = "dry run: the configuration is valid; nothing was run or written (drop --dry-run to run it)"


def _params(values: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items()) or "no parameters"


def _output_state(checked: runner.Plan) -> str:
    """What a real run would do with its output directory (plan() has already refused a foreign one): a result
    the code here would compute none of differently is reused; one that other code measured is *stale*, and
    only its stale stages run again (issue #62, :mod:`rapt_audit.pipeline.stage_reuse`), named by component."""
    if checked.existing is not None:
        if checked.config.force:
            return "holds this run; --force runs it again"
        return "holds this run; it would be reused (--force runs it again)"
    if not (checked.out / runner.RESULT_FILE).is_file():
        return "new"
    if checked.config.force:
        return "holds this run, measured by other code or with failed attacks; --force runs all of it again"
    stored = stage_reuse.reusable_in(checked.out, checked.config, checked.here or stage_reuse.cell_code(
        checked.config))
    stale = "; ".join(stored.stale) or "its failed attacks"
    kept = ", ".join(stored.names()) or "nothing"
    return (f"holds this run, stale against the code here ({stale}): those stages run again and {kept} is reused "
            "(--force runs all of it again)")


def plan_rows(checked: runner.Plan) -> list[tuple[str, str]]:
    """The plan of one checked run as ``(heading, text)`` rows.

    Attacks the run would skip are listed as skipped with the reason, where the plan can tell
    (:func:`known_skip`); an attack may still decline at run time for reasons only the run sees.
    """
    config, defense, dataset = checked.config, checked.defense, checked.dataset
    exposes = ", ".join(sorted(defense.exposes)) or "nothing"
    rows = [("defense", f"{config.defense} (releases {exposes}): {_params(get_params(defense))}")]
    kind = "SYNTHETIC DEMO DATA" if dataset.synthetic else dataset.source
    labels = "" if dataset.has_labels else "; no task labels, so utility is not measured"
    rows.append(("dataset", f"{dataset.name}, {len(dataset.records)} records ({kind}){labels}"))
    if "columns" in dataset.notes:  # the user's own file: say what was read from it, and what was not
        rows.append(("columns", _file_columns(dataset)))
    rows.append(("splits", _params(checked.splits.sizes())))
    rows.append(("run", f"profile {config.profile}, model {config.model}, seed {config.seed}, device {config.device}"))
    run, skipped = [], []
    for name, attack in checked.attacks.items():
        explicit = {k: v for k, v in get_params(attack).items() if k in config.attack_args.get(name, {})}
        label = f"{name}({_params(explicit)})" if explicit else name
        reason = known_skip(attack, checked)
        if reason is None:
            run.append(label)
        else:
            skipped.append(f"skipped: {label}: {reason}")
    rows.append(("attacks", f"{len(run)} to run: {', '.join(run) or 'none'}"))
    rows += [("", line) for line in skipped]
    rows.append(("output", f"{checked.out / runner.RESULT_FILE}: {_output_state(checked)}"))
    return rows


def known_skip(attack: Any, checked: runner.Plan) -> str | None:
    """Why the run would skip ``attack``, where the plan can tell before any work (else ``None``).

    An attack skips a release of kinds it cannot read; an attribute-inference attack (one whose
    ``attribute`` parameter names the private attribute it infers) skips when none of the
    attacker's training records carries that attribute (SST-2 carries none), as its ``fit`` would.
    """
    if (reason := unreadable_release(attack.requires, checked.defense.exposes, checked.config.defense)) is not None:
        return reason
    attribute = getattr(attack, "attribute", None)
    train = checked.splits.attacker.train
    if isinstance(attribute, str) and not any(r.attributes.get(attribute) not in (None, "") for r in train):
        present = sorted({k for r in train for k in r.attributes})
        return (f"the attacker's records carry no {attribute!r} attribute (attributes present: "
                f"{', '.join(present) or 'none'})")
    return None


def _file_columns(dataset: Any) -> str:
    """``text=review, label=stars (neg, pos), attributes=gender(2),age(6 bins); 3 empty texts dropped``."""
    notes, used = dataset.notes, dict(dataset.notes["columns"])
    parts = []
    for key, column in used.items():
        if key == "label":
            names = dataset.label_names
            shown = ", ".join(names[:6]) + (f", ... ({len(names)} classes)" if len(names) > 6 else "")
            column = f"{column} ({shown})"
        elif key == "attributes":
            bins = notes.get("attribute_bins", {})
            column = ",".join(f"{a}({len(dataset.attribute_values.get(a, ()))}{' bins' if a in bins else ''})"
                              for a in column)
        elif key == "entities":
            column = f"{column} ({notes.get('records_with_entities', 0)} records with spans)"
        parts.append(f"{key}={column}")
    text = f"{notes.get('format')}: " + ", ".join(parts)
    if notes.get("dropped_empty_text"):
        text += f"; {notes['dropped_empty_text']} rows with empty text dropped"
    if notes.get("missing_attributes"):
        text += "; missing attribute values: " + _params(dict(notes["missing_attributes"]))
    return text


def _format(rows: Sequence[tuple[str, str]], indent: str = "") -> list[str]:
    return [f"{indent}{head:<9} {text}" for head, text in rows]


def run_plan(config: Any) -> str:
    """Check one run configuration and describe it.

    Raises:
        RaptAuditError: exactly as :func:`rapt_audit.pipeline.runner.run` would, before any work.
    """
    return "\n".join(_format(plan_rows(runner.plan(config))) + [FOOTER])


def sweep_plan(cells: Sequence[Cell], *, out: Path) -> str:
    """Check every cell of a sweep (as ``run_sweep`` does before it starts) and describe them.

    The first cell is described in full; every other cell by the rows that differ from it, and its
    output directory.
    """
    plans = [plan_rows(runner.plan(cell.config)) for cell in cells]
    first = set(plans[0]) if plans else set()
    lines = [f"sweep of {len(cells)} cell(s) in {out} (finished cells are reused; a stale one, measured by other "
             "code, has only its stale stages run again)"]
    for i, (cell, rows) in enumerate(zip(cells, plans)):
        shown = rows if i == 0 else [r for r in rows if r not in first or r[0] == "output"]
        lines.append(f"cell {cell.label}" + ("" if i == 0 else " (as the first cell except:)"))
        lines += _format(shown, indent="  ")
    return "\n".join(lines + [FOOTER])


__all__ = ["known_skip", "plan_rows", "run_plan", "sweep_plan"]

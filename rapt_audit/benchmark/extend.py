"""``benchmark run PUBLISHED --add FILE``: your defenses added to a published benchmark, only their cells run.

The published folder (the committed ``reports/NAME/`` or a downloaded copy) fixes everything but the
defenses: its own copy of its file (``benchmark.toml``, read by :func:`~rapt_audit.benchmark.admit.read_published`)
gives the name, profile, model, seeds, ``[service]``, ``[datasets]``, ``[splits]`` and attacks. ``FILE``
holds ``[defenses.NAME]`` tables only; the extended file is the published text with ``FILE``'s appended,
so every published cell keeps its ``cell_id`` and is reused, and only the added defenses' cells are new.

Nothing is written into the published folder: the run writes into a new ``--out``, into which the
published cells' folders are copied (so the folder's index, the full benchmark plus the additions, has
every cell it lists, and it is exactly what ``benchmark verify`` expects from a contributor).

Which code may add cells (issue #62, :func:`check_same_code`): a table's columns are the core and the attacks,
whose digest is every published signature's ``code:``; each defense's own digest is its row's. So cells of a new
defense join a table of per-component published cells when the code here has the same core and attacks (the same
``code:``), whatever the published defenses' digests are (their rows are copied, never re-run, each with its own
digest). Published cells signed before per-component digests hold one digest of the whole package: they are one
component, and cells may be added only by the code whose package digest it is, as before.
"""

from __future__ import annotations

import shutil
import tempfile
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

from rapt_audit.api.errors import UsageError
from rapt_audit.api.components import table_codes
from rapt_audit.benchmark.admit import Published, read_published
from rapt_audit.benchmark.plan import BenchCell
from rapt_audit.benchmark.run import COPY_FILE, INDEX_FILE
from rapt_audit.benchmark.locate import find_line
from rapt_audit.benchmark.spec import Benchmark, BenchmarkError, read_toml, resolve
from rapt_audit.benchmark.validate import load_benchmark
from rapt_audit.benchmark.verify import matches
from rapt_audit.pipeline.stage_reuse import cell_attacks

#: The only top-level key an additions file may hold: the rest is the published benchmark's.
ADD_KEYS = ("defenses",)


@dataclass(frozen=True)
class Extended:
    """A published benchmark with defenses added.

    Attributes:
        bench: The extended benchmark (named and indexed as the published one; its path: ``OUT/benchmark.toml``).
        published: The published folder read back.
        added: The added defenses' names, in the file's order.
    """

    bench: Benchmark
    published: Published
    added: tuple[str, ...]

    def is_added(self, cell: BenchCell) -> bool:
        """Whether ``cell`` is one of the added defenses' (the only cells the run may run)."""
        return cell.defense in self.added


def published_folder(source: str) -> Path:
    """The published folder ``benchmark run SOURCE --add`` names: a folder holding ``benchmark.json``, or NAME
    for ``reports/NAME`` below the working folder.

    Raises:
        UsageError: when neither is there (say what to give).
    """
    for candidate in (Path(source).expanduser(), Path("reports") / source):
        if (candidate / INDEX_FILE).is_file():
            return candidate
    raise UsageError(f"--add needs the published benchmark's folder, and {source} is none (no {INDEX_FILE} there or "
                     f"in reports/{source}); give the committed reports/NAME/ of a checkout or a downloaded copy")


def check_same_code(published: Published) -> None:
    """Refuse, before any work, to add cells that would be measured by other code than every published cell.

    A cell's signature names the code that measured it (``code:``), so cells run here would sit in a table of their
    own beside the published ones (and ``benchmark verify`` would refuse them): the point of ``--add`` is lost.

    Raises:
        UsageError: naming both digests and the fix.
    """
    # The table's code is its core's and its attacks' (a new defense brings its own digest, per row).
    here = {code for r in published.joined.cells.values()
            for code in table_codes(cell_attacks(r))}
    codes = sorted({code for dataset in published.signatures for code in published.codes(dataset)})
    if not codes or set(codes) <= here:
        return
    here = sorted(here)[0] if len(here) == 1 else ", ".join(sorted(here))
    shas = sorted({str(r.env["git_sha"]) for r in published.joined.cells.values() if r.env.get("git_sha")})
    where = f" (git checkout {shas[0]})" if len(shas) == 1 else ""
    ran = ", ".join(c or "(none)" for c in codes)
    raise UsageError(f"the published cells in {published.folder} were measured by code {ran}, this rapt-audit is "
                     f"code {here}: cells run here would carry another signature and sit in a "
                     f"table of their own, and benchmark verify would refuse them. Install the rapt-audit the "
                     f"benchmark was published with{where}, or run the published benchmark again with this one first")


def read_additions(path: Path, published: Benchmark) -> tuple[str, tuple[str, ...]]:
    """The text of an additions file and the defenses it adds.

    Raises:
        BenchmarkError: at the line of a key other than ``[defenses.NAME]`` (the published header is not the
            contributor's to change), of a defense the published benchmark already runs, or when it adds none.
    """
    text, data = read_toml(path)
    for key in data:
        if key not in ADD_KEYS:
            raise BenchmarkError(path, find_line(text, (key,)),
                                 f"{key!r} is the published benchmark's ({published.path}): an --add file holds only "
                                 "[defenses.NAME] tables; remove it")
    defenses = data.get("defenses")
    if not isinstance(defenses, dict) or not defenses:
        raise BenchmarkError(path, 1, "adds no defense; write a [defenses.NAME] table for each defense to add")
    taken = {d.name for d in published.defenses}
    for name in defenses:
        if name in taken:
            raise BenchmarkError(path, find_line(text, ("defenses", name)),
                                 f"defense {name!r} is already on the published benchmark; add only new defenses "
                                 "(its published cells are reused as they are)")
    return text, tuple(defenses)


def extend(source: str, add: str | Path, *, out: Path, data_dir: str | None = None,
           problems: list[str] | None = None, max_cells: int | None = None) -> Extended:
    """The published benchmark of ``source`` with the defenses of ``add``, checked as any benchmark file is.

    Raises:
        UsageError: for no published folder, an ``out`` that is the published folder, or a bad additions file
            (``FILE:LINE:`` of the additions file for a problem in its tables).
        ResultError: for a published folder that cannot be read back (see ``read_published``).
    """
    folder = published_folder(source)
    if out.resolve() == folder.resolve():
        raise UsageError(f"--out {out} is the published folder: it is never written; give a new folder "
                         "(the published cells are copied into it)")
    published = read_published(folder)
    check_same_code(published)
    add_path = resolve(add)
    add_text, added = read_additions(add_path, published.bench)
    head = published.bench.text if published.bench.text.endswith("\n") else published.bench.text + "\n"
    text = f"{head}\n{add_text}"
    offset = head.count("\n") + 1  # the additions' first line in the extended text
    with tempfile.TemporaryDirectory() as scratch:
        scratch_file = Path(scratch) / COPY_FILE
        scratch_file.write_text(text, encoding="utf-8")
        try:
            bench = load_benchmark(scratch_file, data_dir=data_dir, problems=problems, max_cells=max_cells)
        except BenchmarkError as exc:  # name the user's file and line, not the scratch copy
            if exc.file != str(scratch_file):
                raise
            where = (add_path, exc.line - offset) if exc.line > offset else (published.bench.path, exc.line)
            raise BenchmarkError(*where, str(exc).split(": ", 1)[1]) from None
    if tuple(d.name for d in bench.defenses)[:len(published.bench.defenses)] != tuple(
            d.name for d in published.bench.defenses):  # a dotted key or inline table could land elsewhere
        raise BenchmarkError(add_path, 1, "write each added defense as its own [defenses.NAME] table")
    if problems is not None:  # the scratch path means nothing to the user
        problems[:] = [p.replace(str(scratch_file), str(out / COPY_FILE)) for p in problems]
    return Extended(replace(bench, path=out / COPY_FILE), published, added)


def select(cells: Sequence[BenchCell], selectors: Sequence[str]) -> list[BenchCell]:
    """The cells that pass every ``--cell`` selector (``benchmark verify``'s: a folder name or KEY=VALUE).

    Raises:
        UsageError: when none does (say which values there are).
    """
    chosen = [c for c in cells if matches(c.to_index(), selectors)]
    if cells and not chosen:
        seen = sorted({f"defense={c.defense}" for c in cells} | {f"seed={c.seed}" for c in cells}
                      | {f"{k}={v}" for c in cells for k, v in c.varying})
        raise UsageError(f"--cell {' '.join(selectors)} matches none of the {len(cells)} cell(s) to run; "
                         f"choose from {', '.join(seen)} or a cell's folder name")
    return chosen


def copy_published(ext: Extended, out: Path) -> int:
    """Copy each finished published cell's folder into ``out`` where it is not there yet; return how many.

    Copies, not links: a later run or edit in ``out`` can never reach the published folder. A symbolic link
    (or a pipe) in it is skipped with a warning naming it, wherever it points: rapt-audit writes none, a link
    out of the folder would carry files from elsewhere into a contribution, and one inside would tie ``out``
    back to the published folder (or, followed, add a file no index lists).
    """
    copied = 0
    for cell in ext.published.joined.index["cells"]:
        source, target = ext.published.folder / cell["name"], out / cell["name"]
        if cell["name"] in ext.published.joined.cells and not target.exists():
            if _foreign(source):
                continue
            shutil.copytree(source, target, ignore=_skip_foreign)
            copied += 1
    return copied


def _foreign(path: Path) -> bool:
    """Whether ``path`` is not ours to copy (a link, or neither a file nor a folder); warns naming it."""
    if path.is_symlink():
        warnings.warn(f"not copied: {path} is a symbolic link (to {path.readlink()}); a published folder holds "
                      "only the files a run wrote", stacklevel=3)
        return True
    if not (path.is_file() or path.is_dir()):
        warnings.warn(f"not copied: {path} is not a regular file or folder", stacklevel=3)
        return True
    return False


def _skip_foreign(folder: str, names: list[str]) -> list[str]:
    """``shutil.copytree``'s ``ignore``: the entries of ``folder`` that :func:`_foreign` refuses."""
    return [name for name in names if _foreign(Path(folder) / name)]


def summary(ext: Extended, cells: Sequence[BenchCell]) -> dict[str, Any]:
    """How many published cells the extended benchmark reuses and how many cells the additions make."""
    ids = ext.published.cell_ids.keys()  # recorded canonically, or as spelled by an index written before issue #60
    return {"published": sum(1 for c in cells if {c.cell.config.cell_id(), c.cell.config.spelling_id()} & ids),
            "added": sum(1 for c in cells if ext.is_added(c))}


__all__ = ["ADD_KEYS", "Extended", "check_same_code", "copy_published", "extend", "published_folder", "read_additions",
           "select", "summary"]

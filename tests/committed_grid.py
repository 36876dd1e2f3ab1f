"""The committed CPU grid (``reports/sst2-cpu``) rendered again in a temporary copy, figures stubbed: once per test
process, for every slow test that reads what its report writes (the claims, the headings and captions).

Rendering it takes minutes (the matched-utility bootstrap over every setting); the figures are no part of what these
tests read (their captions are, and a stubbed figure keeps its caption).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from unittest import mock

import pytest

from rapt_audit.benchmark.render import write_benchmark_report
from rapt_audit.benchmark.run import INDEX_FILE
from rapt_audit.reporting import figures

ROOT = Path(__file__).resolve().parent.parent
GRID = ROOT / "reports" / "sst2-cpu"
#: What a render writes: left out of the copy, so that the copy's are this code's.
RENDERED = ("index.html", "leaderboard.md", "claims.md", "figures")

_CACHE: dict[str, Path] = {}


def no_image(fig, stem, caption):  # noqa: ANN001, ANN201
    """A figure without its drawing: its stem and caption kept, a PNG signature for bytes."""
    figures._pyplot().close(fig)
    return figures.Figure(stem, caption, b"\x89PNG\r\n\x1a\n", b"")


def render(folder: Path) -> Path:
    """``folder``'s benchmark report, leaderboard and claims written with the figures stubbed; ``folder``."""
    with mock.patch.object(figures, "_render", no_image):
        write_benchmark_report(folder)
    return folder


def rendered_grid(factory: pytest.TempPathFactory) -> Path:
    """The committed grid's copy, rendered by this code (skipped where the checkout has no grid)."""
    if not (GRID / INDEX_FILE).is_file():
        pytest.skip(f"{GRID} is not in this checkout")
    if "grid" not in _CACHE:
        folder = factory.mktemp("committed") / GRID.name
        shutil.copytree(GRID, folder, ignore=shutil.ignore_patterns(*RENDERED))
        _CACHE["grid"] = render(folder)
    return _CACHE["grid"]


__all__ = ["GRID", "no_image", "render", "rendered_grid"]

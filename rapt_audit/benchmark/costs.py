"""``costs.toml``: what a benchmark cell costs, by profile, service model and method, and defense (issue #65).

A cell's cost depends most on the service it customizes: the same cell under an mpnet service took 71 min where
MiniLM's figures said 45. So the figures are filed by the service's model (the run's service role:
``[service] model``, else the client's ``model``; :mod:`rapt_audit.pipeline.roles`) and the method that
customizes it (the cell's ``method``), and a cell reads the figures of its own service and method. A defense
that takes no ``method`` (its service is not customized: CAPE, DPNR, SnD, the local-only baselines) reads any
section of its service model. Where its service or method has no figure, a figure measured under another is
a *fallback*, and says so. The file's own header says how it is laid out and where each figure was measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from rapt_audit.api.parsing import read_document
from rapt_audit.pipeline.estimates import Figure

COSTS_FILE = Path(__file__).with_name("costs.toml")


@dataclass(frozen=True)
class Section:
    """One ``[PROFILE.MODEL.METHOD]`` table: seconds a cell by ``defense.dataset`` or ``defense``."""

    model: str
    method: str
    figures: Mapping[str, float]

    def key(self, defense: str, dataset: str) -> str | None:
        """The key of the figure for ``defense`` on ``dataset`` (``defense.dataset``, else ``defense``), if any."""
        return next((k for k in (f"{defense}.{dataset}", defense) if k in self.figures), None)


@dataclass(frozen=True)
class Costs:
    """A profile's figures: its flat guess (``default``), its sections and the spellings of each model."""

    profile: str
    default: float | None
    sections: tuple[Section, ...]
    aliases: Mapping[str, str]

    def model_key(self, spec: str) -> str:
        """The name a model's figures are filed under (``all-mpnet-base-v2`` → ``mpnet``), else the spec itself."""
        return self.aliases.get(spec.lower(), spec)

    def defenses(self) -> set[str]:
        """Every defense some section of the profile has a figure for."""
        return {key.split(".", 1)[0] for s in self.sections for key in s.figures}

    def figure(self, defense: str, dataset: str, *, model: str, method: str | None) -> Figure | None:
        """The figure a cell of ``defense`` on ``dataset`` under service ``model`` customized by ``method`` (``None``:
        the defense takes none) reads: one of its own service and method (exact), else one measured under another
        (a fallback, said so), else ``None``."""
        model = self.model_key(model)
        own = [s for s in self.sections if s.model == model and method in (None, s.method)]
        for section in own + [s for s in self.sections if s not in own]:
            key = section.key(defense, dataset)
            if key is None:
                continue
            seconds = section.figures[key]
            measured = f"service {section.model}, method {section.method}"
            if section in own:
                return Figure(defense, dataset, seconds, f"{self.profile}-profile figure for {key} (costs.toml, "
                                                         f"{measured})")
            wanted = f"service {model}" + (f", method {method}" if method else "")
            return Figure(defense, dataset, seconds,
                          f"fallback: costs.toml has no {self.profile}-profile figure for {defense} on {dataset} with "
                          f"{wanted}; its figure measured with {measured} ({key}: {seconds:g} s)", exact=False)
        return None


def read_costs(profile: str, path: Path = COSTS_FILE) -> Costs:
    """The figures of ``profile`` in ``path`` (none when the file has no table for it).

    Raises:
        ValueError: for a figure that is not a number, or a section that is not ``[PROFILE.MODEL.METHOD]``.
    """
    document = read_document(path, source=str(path), fmt="toml")[1]
    aliases = {spelling.lower(): name for name, spellings in document.get("models", {}).items() for spelling in
               [name, *spellings]}
    table: Mapping[str, Any] = document.get(profile, {})
    sections = []
    for model, methods in table.items():
        if model == "default":
            continue
        if not isinstance(methods, dict) or not all(isinstance(v, dict) for v in methods.values()):
            raise ValueError(f"{path}: [{profile}.{model}] must hold one table per method ([{profile}.{model}.METHOD])")
        for method, figures in methods.items():
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in figures.values()):
                raise ValueError(f"{path}: [{profile}.{model}.{method}] holds a figure that is not a number of seconds")
            sections.append(Section(model, method, {k: float(v) for k, v in figures.items()}))
    default = table.get("default")
    return Costs(profile, None if default is None else float(default), tuple(sections), aliases)


__all__ = ["COSTS_FILE", "Costs", "Section", "read_costs"]

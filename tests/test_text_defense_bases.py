"""Base classes carry only the parameters they use, and a plugin's name is written once (issue #30, point 1).

A text defense without η subclasses ``TextDefense``: its parameters are its own and the service's
customization settings, its release says nothing of η, and a report shows neither an η in its row nor
a calibration row for it. The dχ defenses (T2T, PCT2T, RAPT) add η, the replacement target and
pretraining through ``DchiTextDefense``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Sequence

import numpy as np

from rapt_audit.api.context import RunContext
from rapt_audit.api.params import Range, get_params, make_plugin
from rapt_audit.api.plugins import ATTACKS, DEFENSES, load
from rapt_audit.defenses._customization import SERVICE_PARAMETERS
from rapt_audit.defenses._dchi_text import DchiTextDefense
from rapt_audit.defenses._text import TextDefense
from rapt_audit.mechanisms.calibration import ReplacementCount
from rapt_audit.pipeline.config import RunConfig
from rapt_audit.pipeline.results import write_result
from rapt_audit.pipeline.runner import compute
from rapt_audit.reporting.collect import collect
from rapt_audit.reporting.report import build_report

#: Split sizes for runs whose subject is what is recorded and reported, not the numbers.
TINY_SPLITS = {"victim_train": 60, "victim_test": 40, "attacker_train": 60, "attacker_valid": 30}

ROOT = Path(__file__).resolve().parents[1]
load()


@dataclass
class WordDrop(TextDefense):
    """Drop each word with probability p."""

    p: Annotated[float, Range(0, 1, low_open=True, high_open=True)] = 0.3

    def privatize(self, texts: Sequence[str], *, rng: np.random.Generator,
                  ctx: RunContext) -> tuple[list[str], ReplacementCount]:
        out, count = [], ReplacementCount()
        for text in texts:
            words = text.split()
            keep = rng.random(len(words)) >= self.p
            out.append(" ".join(w for w, k in zip(words, keep) if k))
            count.add(ReplacementCount(perturbed=len(words), replaced=0, dropped=int((~keep).sum())))
        return out, count


def test_a_plain_text_defense_has_no_eta_replacement_or_pretraining():
    params = list(get_params(WordDrop()))
    assert params[0] == "p" and set(params[1:]) == SERVICE_PARAMETERS  # its own first, then the service's
    assert not {"eta", "replacement", "pretrain", "pretrain_steps", "pretrain_corpus"} & set(params)
    t2t = get_params(make_plugin(DEFENSES, "t2t", {}))
    assert {"eta", "replacement", "pretrain", "unit"} <= set(t2t) and issubclass(DEFENSES.get("t2t"), DchiTextDefense)


def test_a_plain_text_defense_runs_and_reports_without_eta(warm_cache, tmp_path, monkeypatch):
    monkeypatch.setenv("RAPT_AUDIT_CACHE", str(warm_cache))
    DEFENSES.add("word_drop", WordDrop)
    try:
        result = compute(RunConfig(defense="word_drop", attacks="random_guess,whitebox", profile="smoke",
                                   dataset="synthetic", defense_args={"p": 0.3}, data_args=TINY_SPLITS))
        t2t = compute(RunConfig(defense="t2t", attacks="random_guess", profile="smoke", dataset="synthetic",
                                defense_args={"eta": 75}, data_args=TINY_SPLITS))
    finally:
        DEFENSES.remove("word_drop")
    meta = result.defense["release_meta"]
    assert meta["mechanism"] == "word_drop" and meta["units_dropped"] > 0 and "verbatim" in meta
    assert "eta" not in meta and "observed_replacement" not in meta
    assert {"eta", "observed_replacement"} <= set(t2t.defense["release_meta"])
    write_result(result, tmp_path / "drop")
    write_result(t2t, tmp_path / "t2t")
    report = build_report(collect([tmp_path]))
    page = report.html
    [row] = [r for g in report.groups for r in g.rows if r.defense == "word_drop"]
    assert row.setting == "p=0.3" and f"<td>{row.setting}</td>" in page  # its own p, no "η=100" it does not have
    calibration = page.split("Calibration: word-replacement probability")[1].split("</table>")[0]
    assert "t2t" in calibration and "word_drop" not in calibration


def test_a_registry_name_is_written_once():
    """Built-in plugins do not write their own name: the registry gives each class the one it is registered by."""
    for folder in ("defenses", "attacks"):
        for path in sorted((ROOT / folder).glob("*.py")):
            assert not re.search(r"^\s+name: ClassVar\[str\] = ", path.read_text(encoding="utf-8"), re.M), path
    for registry in (DEFENSES, ATTACKS):
        for name in registry.names():
            assert registry.get(name).name == name


def test_the_cell_id_of_a_builtin_run_is_unchanged():
    """Results written before the bases were split stay valid (a committed reference result): still this run, and
    its folder label (the id as it was spelled before settings were canonical, issue #60) the same."""
    path = next(p for p in sorted(ROOT.glob("reports/**/result.json"))
                if json.loads(p.read_text(encoding="utf-8"))["config"]["defense"] in {"t2t", "pct2t", "rapt"})
    doc = json.loads(path.read_text(encoding="utf-8"))
    config = RunConfig(**{k: v for k, v in doc["config"].items() if k in RunConfig.__dataclass_fields__})
    assert config.spelling_id() == doc["cell_id"] and config.matches(doc["config"])

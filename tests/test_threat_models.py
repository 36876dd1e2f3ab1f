"""Each attack's threat model as data (issue #30, point 1): declared, checked, recorded, selected and reported.

An attack states what its adversary knows, whether it adapts to the defense and which auxiliary data it
holds (:class:`rapt_audit.api.threat.ThreatModel`); ``tag:adaptive`` follows from the declaration, a
result records it in ``env.threat_models``, and the report groups attacks by it. A plugin that declares
none is "undeclared", never guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest

from rapt_audit.api.plugins import ATTACKS, load, plugin_problem
from rapt_audit.api.threat import UNDECLARED, ThreatModel, threat_model_record
from rapt_audit.pipeline.config import RunConfig
from rapt_audit.pipeline.results import read_result, write_result
from rapt_audit.pipeline.runner import compute
from rapt_audit.reporting.collect import collect
from rapt_audit.reporting.report import build_report
from tests.fake_plugins import FakeAttack
from tests.result_factory import fake_result

#: Split sizes for runs whose subject is what is recorded and reported, not the numbers.
TINY_SPLITS = {"victim_train": 60, "victim_test": 40, "attacker_train": 60, "attacker_valid": 30}

ROOT = Path(__file__).resolve().parents[1]
load()

#: The attacks that train on the defense's releases of their own data.
ADAPTIVE = {"ae_inversion", "attribute_age", "attribute_gender", "bayes_inversion", "bow_inversion", "mlp_inversion",
            "ner_adaptive"}


def test_every_builtin_attack_declares_its_threat_model_truthfully():
    for name in ATTACKS.names():
        model = ATTACKS.get(name).threat_model
        assert isinstance(model, ThreatModel), name
        assert model.adaptive == (name in ADAPTIVE), name
    assert "release" not in ATTACKS.get("random_guess").threat_model.knows  # a prior-only baseline
    assert "originals" in ATTACKS.get("mutual_info").threat_model.knows  # an auditor's estimator


def test_tag_adaptive_follows_the_declaration():
    assert set(ATTACKS.select("tag:adaptive")) == ADAPTIVE
    assert {"mlp_inversion", "ae_inversion", "ner_adaptive"} <= set(ATTACKS.select("tag:adaptive"))
    assert "adaptive" not in ATTACKS.entry("whitebox").tags


def test_a_threat_model_refuses_what_it_cannot_mean():
    with pytest.raises(ValueError, match="known values: release, mechanism"):
        ThreatModel(knows=("everything",))
    with pytest.raises(ValueError, match="must know the 'mechanism' and hold some auxiliary data"):
        ThreatModel(knows=("release",), adaptive=True, auxiliary=("attacker_split",))
    with pytest.raises(TypeError, match="tuple of strings"):
        ThreatModel(knows="release")  # type: ignore[arg-type]
    model = ThreatModel(knows=("release", "mechanism"), adaptive=True, auxiliary=("attacker_split",), note="n")
    assert ThreatModel.from_dict(model.to_dict()) == model
    assert model.label().startswith("adaptive (trains on the defense's releases of its own data) · knows the "
                                    "victim's release, the mechanism and its parameter · holds its own records")


_Attack = FakeAttack


@dataclass
class _WrongThreatModel(_Attack):
    """Declares its threat model as a dict."""

    threat_model: ClassVar[Any] = {"adaptive": True}


def test_a_plugin_without_a_threat_model_is_undeclared_and_a_wrong_one_is_refused():
    assert plugin_problem("attack", _Attack) is None
    assert threat_model_record(_Attack) == UNDECLARED
    problem = plugin_problem("attack", _WrongThreatModel)
    assert problem is not None and re.search(r"threat_model must be a rapt_audit ThreatModel .* got dict", problem)


def test_a_run_records_each_attacks_threat_model(warm_cache, tmp_path, monkeypatch):
    monkeypatch.setenv("RAPT_AUDIT_CACHE", str(warm_cache))
    ATTACKS.add("plain_attack", _Attack)
    try:
        result = compute(RunConfig(defense="identity", attacks="random_guess,plain_attack", profile="smoke",
                                   dataset="synthetic", data_args=TINY_SPLITS))
    finally:
        ATTACKS.remove("plain_attack")
    recorded = result.env["threat_models"]
    assert recorded["plain_attack"] == UNDECLARED
    assert recorded["random_guess"] == ATTACKS.get("random_guess").threat_model.to_dict()
    write_result(result, tmp_path / "run")  # valid under the schema, and read back as written
    assert read_result(tmp_path / "run").env["threat_models"] == recorded


def test_the_report_groups_attacks_by_threat_model(tmp_path):
    result = fake_result(privacy={"whitebox": 0.3, "mlp_inversion": 0.6, "ner_adaptive": 0.7, "plain_attack": 0.9})
    result.env["threat_models"] = {"whitebox": ATTACKS.get("whitebox").threat_model.to_dict(),
                                   "plain_attack": UNDECLARED}  # the others: read from the installed attacks
    write_result(result, tmp_path / "a")
    page = build_report(collect([tmp_path])).html
    blocks = page.split("<div class='threat'>")[1:]
    assert len(blocks) == 4  # whitebox; mlp_inversion; ner_adaptive (other auxiliary data); undeclared
    by_model = {re.search(r"<strong>Threat model:</strong> ([^<]*)</p>", b).group(1): b for b in blocks}
    assert any(k.startswith("not adaptive") and "attack-whitebox" in b for k, b in by_model.items())
    undeclared = next(b for k, b in by_model.items() if k.startswith("undeclared"))
    assert "attack-plain_attack" in undeclared
    adaptive = [b for k, b in by_model.items() if k.startswith("adaptive")]
    assert adaptive and all("attack-whitebox" not in b for b in adaptive)
    assert page.index("attack-whitebox") < page.index("attack-mlp_inversion") < page.index("attack-plain_attack")


def test_results_without_threat_models_still_load_and_report():
    committed = sorted(ROOT.glob("reports/**/result.json"))
    assert committed
    result = read_result(committed[0])
    assert "threat_models" not in result.env

"""A token-embedding defense written on the public base carries only its own parameters (issue #30, point 1).

A plugin on ``TokenEmbeddingDefense`` implements ``perturb`` alone: its parameters are its own and the
service's settings (no η), it passes the conformance battery, its release records no η, and a report
labels its row without one. The built-in ``embedding`` is the same base with η and dχ noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest

from rapt_audit.api.params import get_params, make_plugin
from rapt_audit.api.plugins import DEFENSES, load
from rapt_audit.defenses._customization import SERVICE_PARAMETERS
from rapt_audit.pipeline.config import RunConfig
from rapt_audit.pipeline.results import write_result
from rapt_audit.pipeline.runner import compute
from rapt_audit.plugin import PluginError, PositiveFloat, RunContext, TokenEmbeddingDefense, check_plugin
from rapt_audit.reporting.collect import collect
from rapt_audit.reporting.report import build_report

load()

#: The service's settings of a token-embedding defense: the customization's, ``probe`` and ``decode_nearest``.
TOKEN_SERVICE_PARAMETERS = SERVICE_PARAMETERS | {"decode_nearest"}


@dataclass
class GaussianRows(TokenEmbeddingDefense):
    """Adds Gaussian noise of scale sigma to each token's input embedding."""

    sigma: PositiveFloat = 0.05

    def perturb(self, vectors: list[np.ndarray], *, rng: np.random.Generator, ctx: RunContext) -> list[np.ndarray]:
        return [v + rng.normal(0.0, self.sigma, v.shape) for v in vectors]


@dataclass
class Unchanged(TokenEmbeddingDefense):
    """Releases the clean rows."""

    def perturb(self, vectors: list[np.ndarray], *, rng: np.random.Generator, ctx: RunContext) -> list[np.ndarray]:
        return vectors


@dataclass
class DropsRows(TokenEmbeddingDefense):
    """Breaks the contract: one row fewer per text."""

    def perturb(self, vectors: list[np.ndarray], *, rng: np.random.Generator, ctx: RunContext) -> list[np.ndarray]:
        return [v[1:] for v in vectors]


@pytest.fixture
def registered():
    """The test plugins registered as an entry point would register them, removed afterwards."""
    plugins = {"gaussian_rows": GaussianRows, "unchanged_rows": Unchanged, "drops_rows": DropsRows}
    for name, cls in plugins.items():
        DEFENSES.add(name, cls)
    yield plugins
    for name in plugins:
        DEFENSES.remove(name)


def test_a_token_embedding_plugin_has_its_own_parameters_and_the_services_only():
    params = list(get_params(GaussianRows()))
    assert params[0] == "sigma" and set(params[1:]) == TOKEN_SERVICE_PARAMETERS  # its own first, then the service's
    assert "eta" not in params
    embedding = get_params(make_plugin(DEFENSES, "embedding", {}))
    assert list(embedding)[0] == "eta" and set(embedding) == TOKEN_SERVICE_PARAMETERS | {"eta"}
    assert issubclass(DEFENSES.get("embedding"), TokenEmbeddingDefense)


def test_the_base_releases_the_tokens_own_rows_and_checks_perturbs_answer(registered, ctx, synthetic_splits):
    records = synthetic_splits.victim_test[:5]
    plain = make_plugin(DEFENSES, "unchanged_rows", {}).fit(synthetic_splits.victim_train, ctx=ctx)
    clean = make_plugin(DEFENSES, "embedding", {"eta": math.inf}).fit(synthetic_splits.victim_train, ctx=ctx)
    released, reference = plain.release(records, ctx=ctx), clean.release(records, ctx=ctx)
    assert all(np.array_equal(a, b) for a, b in zip(released.token_embeddings, reference.token_embeddings))
    assert dict(released.meta) == {"mechanism": "unchanged_rows"}  # no η it does not have
    noisy = make_plugin(DEFENSES, "gaussian_rows", {"sigma": 0.5}).fit(synthetic_splits.victim_train, ctx=ctx)
    vectors = noisy.release(records, ctx=ctx).token_embeddings
    assert all(v.dtype == np.float32 and v.shape == c.shape and not np.array_equal(v, c)
               for v, c in zip(vectors, reference.token_embeddings))
    with pytest.raises(PluginError, match="perturb\\(\\) must return one numpy array per text"):
        make_plugin(DEFENSES, "drops_rows", {}).fit(synthetic_splits.victim_train, ctx=ctx).release(records, ctx=ctx)


def test_a_token_embedding_plugin_passes_the_conformance_battery(registered):
    report = check_plugin("defense", "gaussian_rows", params={"method": "probe"})
    assert report.passed and not report.skipped, report.format()


def test_a_token_embedding_plugin_runs_and_reports_without_eta(warm_cache, registered, tmp_path, monkeypatch):
    monkeypatch.setenv("RAPT_AUDIT_CACHE", str(warm_cache))
    result = compute(RunConfig(defense="gaussian_rows", attacks="random_guess", profile="smoke",
                               dataset="synthetic", defense_args={"sigma": 0.1, "method": "probe"},
                               data_args={"victim_train": 60, "victim_test": 40, "attacker_train": 60,
                                          "attacker_valid": 30}))  # what is reported, not the numbers
    assert set(result.defense["params"]) == {"sigma"} | TOKEN_SERVICE_PARAMETERS
    assert "eta" not in result.defense["release_meta"]
    write_result(result, tmp_path / "gaussian")
    report = build_report(collect([tmp_path]))
    [row] = [r for g in report.groups for r in g.rows if r.defense == "gaussian_rows"]
    assert row.setting == "sigma=0.1" and f"<td>{row.setting}</td>" in report.html  # its own σ, no "η=100"

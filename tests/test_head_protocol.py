"""``method=head``: embedding as a service (SnD's protocol), the cheap service protocol of issue #63 item 3.

The service's frozen model mean-pools what it receives and the local encoder client's MLP head is trained
on those vectors. On clean text that is exactly what ``local client=encoder`` computes with the service's
model on the client, so the two must train one head on the same vectors.
"""

from __future__ import annotations

import numpy as np
import pytest

from rapt_audit import RunConfig, run
from rapt_audit.api.errors import UsageError
from rapt_audit.defenses._representation import TaskClassifier
from tests.conftest import SERVICE_WIDTH


@pytest.fixture
def head_inputs(monkeypatch):
    """Every (vectors, head settings) a head is trained on during the test."""
    seen = []
    real = TaskClassifier.fit_task_classifier

    def spy(self, x, y, **kwargs):
        seen.append((np.array(x), {k: getattr(self, k) for k in ("hidden", "dropout", "lr", "epochs", "batch_size")}))
        return real(self, x, y, **kwargs)

    monkeypatch.setattr(TaskClassifier, "fit_task_classifier", spy)
    return seen


def test_identity_under_head_trains_the_encoder_clients_head_on_the_same_vectors(tmp_path, head_inputs):
    common = dict(dataset="synthetic", profile="smoke", attacks="random_guess")
    identity = run(RunConfig(defense="identity", defense_args={"method": "head"}, out=str(tmp_path / "identity"),
                             **common))
    run(RunConfig(defense="local", defense_args={"client": "encoder"}, out=str(tmp_path / "local"), **common))
    (served, served_head), (client, client_head) = head_inputs
    assert served_head == client_head and served.shape == client.shape
    np.testing.assert_allclose(served, client, rtol=0, atol=1e-6)  # the same frozen vectors of the same texts
    record = identity.defense["release_meta"]["customization"]
    assert record["settings"]["method"] == "head" and record["train_examples"] == len(served)
    assert 0.5 < identity.utility["accuracy"].value <= 1.0


def test_a_text_defense_under_head_reads_the_services_vectors(small_service, tmp_path, head_inputs):
    result = run(RunConfig(defense="t2t", attacks="random_guess", dataset="synthetic", profile="smoke",
                           service_model=small_service, defense_args={"eta": 100, "method": "head"},
                           out=str(tmp_path / "t2t")))
    (vectors, _), = head_inputs
    assert vectors.shape[1] == SERVICE_WIDTH  # the service's frozen model, not the client's 384-wide MiniLM
    assert result.defense["release_meta"]["customization"]["service"] == small_service


def test_a_token_embedding_release_under_head_is_pooled_by_the_service(small_service, tmp_path, head_inputs):
    run(RunConfig(defense="embedding", attacks="random_guess", dataset="synthetic", profile="smoke",
                  service_model=small_service, defense_args={"eta": 50, "method": "head"},
                  out=str(tmp_path / "embedding")))
    (vectors, _), = head_inputs
    assert vectors.shape[1] == SERVICE_WIDTH


def test_rapt_refuses_head_because_it_trains_the_encoder(tmp_path):
    with pytest.raises(UsageError, match="rapt trains the encoder, so method=head"):
        run(RunConfig(defense="rapt", dataset="synthetic", profile="smoke", defense_args={"method": "head"},
                      out=str(tmp_path / "rapt")))

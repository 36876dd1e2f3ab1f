"""The attacks' training on CUDA (issue #12): the trained NER attack and a learned inversion attack.

At tiny sizes on the synthetic corpus: the NER classifier is trained from sentences tokenized once
and kept on the device, and tags; the MLP inversion attack trains on device-resident features.
Both must run on CUDA end to end, leave their networks there, and produce well-formed results.
Skipped without CUDA (``gpu`` marker, see tests/conftest.py); the same code paths run on CPU in
tests/test_attacks_inference.py and tests/test_attacks_inversion.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from rapt_audit.api.params import make_plugin
from rapt_audit.api.plugins import ATTACKS, DEFENSES, load
from rapt_audit.pipeline.context import RunContext

load()

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cuda_ctx(tmp_path_factory) -> RunContext:
    return RunContext(seed=3, profile="smoke", device="cuda", cache_dir=tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def splits():
    from rapt_audit.data import SplitSizes, load_dataset, make_splits

    return make_splits(load_dataset("synthetic"), SplitSizes(20, 40, 80, 30), seed=3)


def test_to_device_copies_indices_to_cuda_unchanged():
    import torch

    from rapt_audit.encoder.encode import to_device

    idx = np.array([5, 0, 3], dtype=np.int64)
    moved = to_device(idx[::-1], "cuda")  # a strided view goes through a contiguous pinned copy
    assert moved.is_cuda and moved.tolist() == [3, 0, 5]
    table = torch.arange(10, device="cuda") * 2
    assert table[to_device(idx, "cuda")].tolist() == [10, 0, 6]


def test_ner_classifier_trains_and_tags_on_cuda(cuda_ctx, splits):
    import torch

    from rapt_audit.attacks._ner_model import predict_tags, token_classifier, train_token_classifier
    from rapt_audit.attacks._ner_tags import iob_labels, spans_to_tags, tokenize_words

    attack = make_plugin(ATTACKS, "ner", {**ATTACKS.get("ner").profiles["smoke"], "epochs": 1})
    records = [r for r in splits.attacker_train if r.entities]
    assert records, "the synthetic corpus has gold entities"
    words = [tokenize_words(r.text) for r in records]
    texts = [[w.text for w in ws] for ws in words]
    tags = [spans_to_tags(w, r.entities) for w, r in zip(words, records)]
    attack._labels = iob_labels(s.label for r in records for s in r.entities)
    initial = {k: v.detach().clone() for k, v in token_classifier(attack, ctx=cuda_ctx).state_dict().items()}
    attack._model = train_token_classifier(attack, texts, tags, ctx=cuda_ctx)
    state = attack._model.state_dict()
    assert all(v.is_cuda for v in state.values())
    assert any(not torch.equal(state[k], initial[k]) for k in initial)  # a step was taken
    victim = [[w.text for w in tokenize_words(r.text)] for r in splits.victim_test] + [[]]
    predicted = predict_tags(attack, victim, ctx=cuda_ctx)
    assert [len(t) for t in predicted] == [len(w) for w in victim]
    assert {t for ts in predicted for t in ts} <= set(attack._labels)


def test_mlp_inversion_fits_and_attacks_on_cuda(cuda_ctx, splits):
    defense = make_plugin(DEFENSES, "embedding", {"eta": 100})
    defense.fit(splits.victim_train, ctx=cuda_ctx)
    release = defense.release(splits.victim_test, ctx=cuda_ctx)
    attack = make_plugin(ATTACKS, "mlp_inversion", {**ATTACKS.get("mlp_inversion").profiles["smoke"],
                                                    "epochs": 2, "context": True})
    attack.fit(splits.attacker, defense, ctx=cuda_ctx)
    assert all(p.is_cuda for p in attack._net.parameters())
    result = attack.attack(release, splits.victim_test, ctx=cuda_ctx)
    top1, prior = result.metrics["token_accuracy"], result.metrics["majority_baseline"]
    assert 0.0 <= top1.ci_low <= top1.value <= top1.ci_high <= 1.0
    # η = 100 leaves most tokens recoverable: the attack beats always guessing the attacker's most frequent
    # token by far (the same code on CPU: 0.98 [0.97, 0.98] against 0.09).
    assert top1.ci_low > prior.ci_high, (top1, prior)
    assert result.details["tokens_scored"] > 0 and len(result.details["valid_token_accuracy_by_epoch"]) >= 1

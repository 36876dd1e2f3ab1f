"""``embedding``'s service customizes the encoder on the released noisy vectors (issue #28, item 3).

Rejects: a service that is told the clean tokens (or placeholders) instead of the released vectors;
an embedding path that differs from the text path when the vectors are the tokens' own rows (then
``embedding`` at η = ∞ could not match ``identity``); a stored service reused for other noise.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from rapt_audit.api.errors import UsageError
from rapt_audit.api.params import make_plugin
from rapt_audit.api.plugins import DEFENSES, load
from rapt_audit.utility.customize import resolve_settings
from rapt_audit.utility.customized import customize_service, inputs_digest, score_customized
from rapt_audit.utility.on_device import tokenize
from rapt_audit.utility.task_model import build_task_model, run_batch
from rapt_audit.utility.token_vectors import TokenVectors

load()


def _released(ctx, records, eta):
    defense = make_plugin(DEFENSES, "embedding", {"eta": eta})
    return defense, defense.release(records, ctx=ctx).token_embeddings


def _token_rows(ctx, texts):
    """Each text's tokens as rows of the model's input table (what the η = ∞ release must be)."""
    loaded = ctx.encoder()
    table = loaded.model.get_input_embeddings().weight.detach().numpy()
    return [table[loaded.tokenizer(t, add_special_tokens=False)["input_ids"]] for t in texts]


@pytest.mark.parametrize("eta", [0.5, math.inf])
def test_the_backbone_receives_the_released_vectors(ctx, synthetic_splits, eta):
    # η = 0.5 on 384-d vectors: noise of norm ~ 770, hundreds of times a token's embedding, so a
    # service fed anything but the release (clean rows, placeholders) is caught at every position.
    records = synthetic_splits.victim_test[:6]
    _, vectors = _released(ctx, records, eta)
    loaded = ctx.encoder()
    settings = resolve_settings("prompt", "smoke", {"precision": "fp32"})
    model = build_task_model(loaded, settings, 2).eval()
    seen = {}
    inner = model.backbone.get_base_model()  # the encoder under peft: after the virtual tokens are prepended
    inner.register_forward_pre_hook(lambda _, args, kwargs: seen.update(kwargs), with_kwargs=True)
    batch = tokenize(loaded.tokenizer, TokenVectors.of(vectors), plain_count=0, max_length=settings.max_length,
                     device="cpu").batch(np.arange(len(records)))
    run_batch(model, batch)
    embeds = seen["inputs_embeds"][:, settings.virtual_tokens:].detach().numpy()
    table = loaded.model.get_input_embeddings().weight.detach().numpy()
    for row, sent in enumerate(vectors):
        sent = sent[:settings.max_length]
        np.testing.assert_array_equal(embeds[row, 1:1 + len(sent)], sent)
        # [CLS] and [SEP] come from the service's own table, clean.
        np.testing.assert_array_equal(embeds[row, 0], table[loaded.tokenizer.cls_token_id])
        np.testing.assert_array_equal(embeds[row, 1 + len(sent)], table[loaded.tokenizer.sep_token_id])
    if math.isinf(eta):
        for sent, clean in zip(vectors, _token_rows(ctx, [r.text for r in records])):
            np.testing.assert_array_equal(sent, clean)
    else:
        assert min(float(np.linalg.norm(v, axis=1).min()) for v in vectors if len(v)) > 100


@pytest.mark.parametrize("method", ["prompt", "prefix", "lora", "full"])
def test_token_rows_give_the_text_paths_logits(ctx, synthetic_splits, method):
    # The same tokens as ids or as their embedding rows: the same input to the encoder, the same logits.
    texts = [r.text for r in synthetic_splits.victim_test[:8]]
    loaded = ctx.encoder()
    settings = resolve_settings(method, "smoke", {"precision": "fp32", "max_length": 12})  # some are cut
    model = build_task_model(loaded, settings, 3).eval()
    idx = np.arange(len(texts))
    ids = tokenize(loaded.tokenizer, texts, plain_count=0, max_length=settings.max_length, device="cpu").batch(idx)
    rows = tokenize(loaded.tokenizer, TokenVectors.of(_token_rows(ctx, texts)), plain_count=0,
                    max_length=settings.max_length, device="cpu").batch(idx)
    np.testing.assert_array_equal(rows["attention_mask"].numpy(), ids["attention_mask"].numpy())
    by_ids, by_rows = run_batch(model, ids)[0], run_batch(model, rows)[0]
    np.testing.assert_allclose(by_rows.detach().numpy(), by_ids.detach().numpy(), rtol=0, atol=1e-6)


def test_a_service_trained_on_token_rows_is_the_text_service(ctx, synthetic_splits):
    # Customization end to end (validation split, lr/epoch choice, scoring) on the η = ∞ release gives
    # the very numbers of the same customization on the texts: embedding at η = ∞ is identity.
    # Half the session's splits: the two paths must give the same numbers at any size, and each trains twice.
    train, test = synthetic_splits.victim_train[:30], synthetic_splits.victim_test[:20]
    y_train, y_test = np.array([r.label for r in train]), np.array([r.label for r in test])
    overrides = {"epochs": 1, "precision": "fp32"}
    scores = []
    for inputs, answers in (([r.text for r in train], [r.text for r in test]),
                            (TokenVectors.of(_released(ctx, train, math.inf)[1]),
                             TokenVectors.of(_released(ctx, test, math.inf)[1]))):
        trained, record = customize_service(inputs, y_train, method="prompt", overrides=overrides, ctx=ctx, key="same")
        scores.append((record["selection"]["chosen"], score_customized(trained, answers, y_test, ctx=ctx, key="same")))
    assert scores[0] == scores[1]


def test_the_service_key_holds_the_released_vectors(ctx, synthetic_splits):
    records = synthetic_splits.victim_train[:10]
    first = TokenVectors.of(_released(ctx, records, 100.0)[1])
    again = TokenVectors.of(_released(ctx, records, 100.0)[1])
    other_noise = TokenVectors.of(_released(ctx, records, 60.0)[1])
    assert inputs_digest(first) == inputs_digest(again)  # same run seed and records: the same release
    assert inputs_digest(first) != inputs_digest(other_noise)
    nudged = TokenVectors.of([v.copy() for v in first.sequences])
    nudged.sequences[0][0, 0] = np.nextafter(nudged.sequences[0][0, 0], np.float32(np.inf))
    assert inputs_digest(nudged) != inputs_digest(first)  # one ulp of one coordinate is another release


def test_a_stored_service_is_reused_for_the_same_release_only(warm_cache, tmp_path, monkeypatch):
    from rapt_audit.pipeline.config import RunConfig
    from rapt_audit.pipeline.runner import compute

    monkeypatch.setenv("RAPT_AUDIT_CACHE", str(warm_cache))

    def services(eta: float) -> dict[str, int]:
        result = compute(RunConfig(defense="embedding", attacks="random_guess", profile="smoke", dataset="synthetic",
                                   precision="fp32", defense_args={"eta": eta},
                                   data_args={"victim_train": 30, "victim_test": 20, "attacker_train": 30,
                                              "attacker_valid": 20}))  # hits and misses, not the numbers
        assert result.defense["release_meta"]["customization"]["settings"]["method"] == "prompt"
        return result.env["release_cache"]["services"]

    assert services(100.0) == {"hit": 0, "miss": 1}
    assert services(100.0) == {"hit": 1, "miss": 0}
    assert services(60.0) == {"hit": 0, "miss": 1}


def test_method_options(ctx, synthetic_splits):
    with pytest.raises(UsageError, match="method=bow"):
        make_plugin(DEFENSES, "embedding", {"method": "bow"})
    # The frozen-encoder probe stays available and trains no service.
    defense = make_plugin(DEFENSES, "embedding", {"eta": 100.0, "method": "probe"})
    defense.fit(synthetic_splits.victim_train, ctx=ctx)
    assert 0 <= defense.utility(synthetic_splits.victim_test, ctx=ctx)["accuracy"].value <= 1
    assert "customization" not in defense.release(synthetic_splits.victim_test, ctx=ctx).meta
    assert ctx.tallies().get("services") is None


def test_decode_nearest_feeds_the_service_the_rows_of_the_nearest_tokens():
    """With ``decode_nearest`` the service reads the embedding rows of the tokens nearest the released vectors."""
    import numpy as np

    from rapt_audit.api.params import make_plugin
    from rapt_audit.api.plugins import DEFENSES, load
    from rapt_audit.mechanisms.engines import token_engine
    from rapt_audit.pipeline.context import RunContext

    load()
    ctx = RunContext(seed=0, profile="smoke", device="cpu")
    engine = token_engine(ctx)
    texts = ["a charming little film", "dull"]
    defense = make_plugin(DEFENSES, "embedding", {"eta": 200.0, "decode_nearest": True})
    released = defense.noisy_embeddings(texts, rng=np.random.default_rng(0), ctx=ctx)
    decoded = defense.service_input(released, ctx)
    assert [len(d) for d in decoded] == [len(r) for r in released]
    for noisy, rows in zip(released, decoded):
        nearest = engine.space.vectors[engine.index.search(noisy)]
        assert np.array_equal(rows, nearest)  # each a vocabulary row, the one nearest its released vector
        assert not np.array_equal(rows, noisy)
    plain = make_plugin(DEFENSES, "embedding", {"eta": 200.0})
    assert all(a is b for a, b in zip(plain.service_input(released, ctx), released))  # the default: as released

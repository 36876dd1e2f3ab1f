"""RAPT and the customization methods: training mechanics, the release, ablations and bad input.

Training tests use the real bundled MiniLM encoder on a handful of texts for one to a few epochs,
so each finishes in seconds on CPU.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from rapt_audit.api.errors import DataError, UnknownNameError, UsageError
from rapt_audit.api.params import make_plugin
from rapt_audit.api.plugins import DEFENSES, load
from rapt_audit.encoder.models import load_model
from rapt_audit.utility.customize import (
    METHODS,
    PlainTokens,
    TrainSettings,
    build_task_model,
    resolve_settings,
    train_classifier,
)
from rapt_audit.utility.on_device import tokenize

load()
# RAPT reads PCT2T's POS lexicon: the `ctx` fixture's cache folder is seeded with the session's
# (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("_pos_template")

TEXTS = ["a wonderful , moving film", "dull and tedious from start to end", "the cast is superb",
         "a boring mess", "sharp , funny and warm", "i hated every minute", "a joy to watch", "clumsy and flat"]
LABELS = np.array([1, 0, 1, 0, 1, 0, 1, 0])
PLAIN = ("river", "carry", "they", "under", "window", "sing")


@pytest.fixture(scope="module")
def minilm():
    return load_model("minilm")


def _plain(vocabulary: int = 50) -> PlainTokens:
    return PlainTokens(PLAIN, tuple(range(len(PLAIN))), vocabulary)


def _with_plain(texts):
    return [" ".join(PLAIN) + " " + t for t in texts]


def _settings(method: str, **changes) -> TrainSettings:
    return resolve_settings(method, "smoke", {"epochs": 1, "batch_size": 4, "virtual_tokens": 4 if method in (
        "prompt", "prefix") else None, **changes})


def test_reconstruction_loss_falls_on_a_tiny_run(minilm):
    settings = _settings("lora", epochs=4, lr=3e-3)
    trained = train_classifier(minilm, _with_plain(TEXTS), LABELS, settings, n_labels=2, seed=0, plain=_plain())
    losses = [epoch["rec_loss"] for epoch in trained.history]
    assert losses[-1] < 0.7 * losses[0], losses


def test_plain_hidden_states_feed_the_head_and_the_head_gets_gradients(minilm):
    import torch

    model = build_task_model(minilm, _settings("prompt"), 2, rec_vocabulary=50)
    batch = tokenize(minilm.tokenizer, _with_plain(TEXTS[:3]), plain_count=len(PLAIN), max_length=16,
                     device="cpu").batch(np.arange(3))
    # Each plain word is one token, right after [CLS]; the task head must not see them.
    assert batch["plain_positions"][0].tolist() == list(range(1, len(PLAIN) + 1))
    assert batch["task_mask"][0, 1:len(PLAIN) + 1].sum() == 0 and batch["task_mask"][0, 0] == 1
    model.eval()
    _, rec_logits = model(batch["input_ids"], batch["attention_mask"], batch["task_mask"], batch["plain_positions"])
    hidden = model.backbone(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    hidden = hidden[:, model.skip:]
    expected = model.reconstruction(hidden[:, 1:len(PLAIN) + 1])
    assert torch.allclose(rec_logits, expected, atol=1e-5)
    targets = torch.arange(len(PLAIN)).repeat(3)
    torch.nn.functional.cross_entropy(rec_logits.reshape(-1, 50), targets).backward()
    for parameter in model.reconstruction.parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0


@pytest.mark.parametrize("method", METHODS)
def test_method_trains_its_own_parameters_only(minilm, method):
    import torch

    model = build_task_model(minilm, _settings(method), 2, rec_vocabulary=50)
    batch = tokenize(minilm.tokenizer, _with_plain(TEXTS[:4]), plain_count=len(PLAIN), max_length=16,
                     device="cpu").batch(np.arange(4))
    logits, rec_logits = model(batch["input_ids"], batch["attention_mask"], batch["task_mask"],
                               batch["plain_positions"])
    loss = torch.nn.functional.cross_entropy(logits, torch.as_tensor(LABELS[:4]))
    loss = loss + torch.nn.functional.cross_entropy(rec_logits.reshape(-1, 50), torch.arange(len(PLAIN)).repeat(4))
    loss.backward()
    backbone = dict(model.backbone.named_parameters())
    trainable = {n for n, p in backbone.items() if p.requires_grad}
    assert trainable, "the method must train something in the backbone"
    for name in trainable:
        assert backbone[name].grad is not None, name
        # LoRA starts with B = 0, so only B has a non-zero gradient on the first step (by design).
        if method != "lora" or "lora_B" in name:
            assert backbone[name].grad.abs().sum() > 0, name
    if method == "full":
        assert trainable == {n for n in backbone if not n.startswith("pooler.")}  # the pooler is unused
    else:
        marker = {"prompt": "prompt_encoder", "prefix": "prompt_encoder", "lora": "lora_"}[method]
        assert all(marker in name for name in trainable), sorted(trainable)[:5]
        frozen = [p for n, p in backbone.items() if not p.requires_grad]
        assert frozen and all(p.grad is None for p in frozen)
    # The process-wide model is never touched.
    assert all(p.grad is None for p in minilm.model.parameters())


def test_trained_model_runs_without_the_reconstruction_head_and_seeds_reproduce(minilm):
    settings = _settings("prompt", epochs=1)
    first = train_classifier(minilm, _with_plain(TEXTS), LABELS, settings, n_labels=2, seed=3, plain=_plain())
    assert first.model.reconstruction is None
    probabilities = first.predict_proba(_with_plain(TEXTS[:5]))
    assert probabilities.shape == (5, 2) and np.allclose(probabilities.sum(1), 1, atol=1e-5)
    again = train_classifier(minilm, _with_plain(TEXTS), LABELS, settings, n_labels=2, seed=3, plain=_plain())
    assert again.history == first.history
    assert np.array_equal(again.predict_proba(_with_plain(TEXTS[:5])), probabilities)
    other = train_classifier(minilm, _with_plain(TEXTS), LABELS, settings, n_labels=2, seed=4, plain=_plain())
    assert other.history != first.history


def test_ablation_without_reconstruction_has_no_head(minilm):
    trained = train_classifier(minilm, _with_plain(TEXTS), LABELS, _settings("lora"), n_labels=2, seed=0,
                               plain=_plain(), reconstruction=False)
    assert "rec_loss" not in trained.history[0]


def test_rapt_release_prepends_privatized_plain_tokens(ctx, synthetic_splits):
    records = synthetic_splits.victim_test[:12]
    rapt = make_plugin(DEFENSES, "rapt", {"eta": math.inf, "plain_tokens": 7}).fit(records, ctx=ctx)
    pct2t = make_plugin(DEFENSES, "pct2t", {"eta": math.inf}).fit(records, ctx=ctx)
    release = rapt.release(records, ctx=ctx)
    plain = release.meta["plain_tokens"]
    assert len(plain) == 7 and release.meta["plain_prefix_words"] == 7 and release.meta["variant"] == "rapt"
    assert all(text.split(" ")[:7] == plain for text in release.texts)  # η = ∞: released unchanged
    assert release.user_texts() == pct2t.release(records, ctx=ctx).texts
    noisy = make_plugin(DEFENSES, "rapt", {"eta": 30.0, "plain_tokens": 7}).fit(records, ctx=ctx)
    noisy_release = noisy.release(records, ctx=ctx)
    prefixes = [text.split(" ")[:7] for text in noisy_release.texts]
    assert any(p != plain for p in prefixes), "at small η the plain tokens must be privatized too"
    assert len({tuple(p) for p in prefixes}) > 1, "each text gets fresh noise on its plain tokens"
    assert noisy_release.meta["plain_tokens"] == plain, "plain tokens are fixed for the task"


def test_rapt_variants_and_vocabulary(ctx):
    assert make_plugin(DEFENSES, "rapt", {"plain_tokens": 0}).variant == "without_plain_tokens"
    assert make_plugin(DEFENSES, "rapt", {"reconstruction": False}).variant == "without_reconstruction"
    defense = make_plugin(DEFENSES, "rapt", {"plain_tokens": 40})
    plain, categories = defense.plain(ctx)
    assert len(plain.words) == 40 and set(categories) <= {"noun", "verb", "pronoun", "preposition"}
    assert all(w.isalpha() for w in plain.words)
    assert max(plain.targets) < plain.vocabulary_size
    assert len(set(ctx.encoder().tokenizer(list(plain.words), add_special_tokens=False)["input_ids"][0])) == 1


def test_unknown_method_lists_the_methods():
    with pytest.raises(UnknownNameError, match="did you mean 'lora'.*prompt, prefix, lora, full"):
        resolve_settings("lorra", "cpu")
    with pytest.raises(UsageError, match="method=bow is not available"):
        make_plugin(DEFENSES, "rapt", {"method": "bow"})
    with pytest.raises(UnknownNameError, match="customization method"):
        make_plugin(DEFENSES, "pct2t", {"method": "adapters"})


def test_prompt_longer_than_the_model_is_refused(minilm):
    settings = resolve_settings("prompt", "cpu", {"virtual_tokens": 500})
    with pytest.raises(UsageError, match="500 virtual tokens .* maximum of 512"):
        train_classifier(minilm, _with_plain(TEXTS), LABELS, settings, n_labels=2, seed=0, plain=_plain())


def test_too_long_prompt_fails_at_fit_before_any_privatization(ctx, synthetic_splits):
    defense = make_plugin(DEFENSES, "rapt", {"virtual_tokens": 480, "max_length": 64})
    with pytest.raises(UsageError, match="480 virtual tokens \\+ 40 plain tokens"):
        defense.fit(synthetic_splits.victim_train, ctx=ctx)


def test_empty_training_split_and_bad_settings(minilm):
    with pytest.raises(DataError, match="training split is empty"):
        train_classifier(minilm, [], np.array([]), _settings("lora"), n_labels=2, seed=0)
    with pytest.raises(UsageError, match="epochs must be a positive integer"):
        resolve_settings("lora", "cpu", {"epochs": 0})
    with pytest.raises(UsageError, match="rec_weight must be >= 0"):
        resolve_settings("lora", "cpu", {"rec_weight": -1.0})
    with pytest.raises(UsageError, match="plain_tokens must be >= 0"):
        make_plugin(DEFENSES, "rapt", {"plain_tokens": -1})


def test_missing_labels_are_a_clear_error(ctx, synthetic_splits):
    from dataclasses import replace

    unlabelled = [replace(r, label=None) for r in synthetic_splits.victim_train[:10]]
    defense = make_plugin(DEFENSES, "rapt", {"eta": 50.0}).fit(unlabelled, ctx=ctx)
    with pytest.raises(DataError, match="have no task label"):
        defense.utility(synthetic_splits.victim_test[:10], ctx=ctx)


def test_attacks_read_the_text_after_the_plain_tokens(ctx, synthetic_splits):
    """At η = ∞ the white-box attacker recovers RAPT's user text exactly as it recovers PCT2T's."""
    from rapt_audit.api.plugins import ATTACKS

    records = synthetic_splits.victim_test[:20]
    outcomes = {}
    for name in ("rapt", "pct2t"):
        defense = make_plugin(DEFENSES, name, {"eta": math.inf}).fit(records, ctx=ctx)
        attack = make_plugin(ATTACKS, "whitebox", {}).fit(synthetic_splits.attacker, defense, ctx=ctx)
        outcomes[name] = attack.attack(defense.release(records, ctx=ctx), records, ctx=ctx).empirical_privacy.value
    assert outcomes["rapt"] == outcomes["pct2t"] < 0.05, outcomes


@pytest.mark.gpu
def test_rapt_trains_on_cuda(data_dir, tmp_path):
    """LoRA on 1,000 SST-2 sentences learns the task on the device: the accuracy's 95 % interval lies above
    the test split's majority share (on CPU: 0.70 [0.655, 0.75] against 0.51; on the synthetic corpus, with
    200 training records, 0.57 [0.51, 0.62] against 0.51, too close to tell a broken customization apart)."""
    from rapt_audit.data import SplitSizes, load_dataset, make_splits
    from rapt_audit.pipeline.context import RunContext
    from tests.chance import majority_share

    splits = make_splits(load_dataset("sst2", data_dir), SplitSizes(1000, 400, 60, 30), seed=1)
    ctx = RunContext(seed=0, profile="smoke", device="cuda", cache_dir=tmp_path)
    defense = make_plugin(DEFENSES, "rapt", {"eta": 100.0, "method": "lora"}).fit(splits.victim_train, ctx=ctx)
    accuracy = defense.utility(splits.victim_test, ctx=ctx)["accuracy"]
    majority = majority_share(r.label for r in splits.victim_test)
    assert accuracy.ci_low > majority, (accuracy, majority)
    assert defense.release(splits.victim_test, ctx=ctx).meta["customization"]["history"]

"""The customization's device path (issue #12): tokenized once, batches by indexing, no per-step reads.

Each split is tokenized once and batches are cut from device tensors; the epoch's statistics and the
"a loss was not finite" flag stay on the device and are read once per epoch (or every
``DIVERGENCE_CHECK_STEPS`` steps). These tests check that the model sees what per-batch tokenization
gave it, that divergence is still reported as before, and the opt-in bf16 precision; the ``gpu`` tests
run the same on CUDA.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from rapt_audit.api.errors import DataError, UsageError
from rapt_audit.api.params import make_plugin
from rapt_audit.api.plugins import DEFENSES, load
from rapt_audit.encoder.models import load_model
from rapt_audit.utility import customize
from rapt_audit.utility.customize import PlainTokens, resolve_settings, train_classifier
from rapt_audit.utility.on_device import FirstNonFinite, tokenize
from rapt_audit.utility.selection import select_and_train
from rapt_audit.utility.training import Diverged

load()

TEXTS = ["a wonderful , moving film", "dull and tedious from start to end", "the cast is superb",
         "a boring mess", "sharp , funny and warm", "i hated every minute", "a joy to watch", "clumsy and flat",
         "a triumph", "a waste of time", "lovely and tender", "painfully slow"]
LABELS = np.array([1, 0] * 6)
# "photosynthesis" is three sub-tokens: the next plain word's position moves with it.
PLAIN = ("photosynthesis", "river", "they", "under", "window", "sing")


@pytest.fixture(scope="module")
def minilm():
    return load_model("minilm")


def _with_plain(texts):
    return [" ".join(PLAIN) + " " + t for t in texts]


def _settings(**changes):
    return resolve_settings("prompt", "smoke", {"epochs": 2, "batch_size": 2, "virtual_tokens": 4, **changes})


def test_a_batch_is_what_tokenizing_its_texts_alone_gives(minilm):
    texts = _with_plain(TEXTS)
    tokens = tokenize(minilm.tokenizer, texts, plain_count=len(PLAIN), max_length=16, device="cpu")
    idx = np.array([3, 0, 9, 1])
    batch = tokens.batch(idx)
    alone = minilm.tokenizer([texts[i] for i in idx], truncation=True, max_length=16 + len(PLAIN) + 2, padding=True,
                             return_tensors="pt")
    assert batch["input_ids"].tolist() == alone["input_ids"].tolist()
    assert batch["attention_mask"].tolist() == alone["attention_mask"].tolist()
    assert batch["rows"].tolist() == idx.tolist()
    for row, i in enumerate(idx):
        words = alone.word_ids(row)
        first = [words.index(w) for w in range(len(PLAIN))]
        assert batch["plain_positions"][row].tolist() == first
        assert first[:2] == [1, 4], "the multi-token first word shifts the others"
        expected = alone["attention_mask"][row].clone()
        expected[first] = 0
        assert batch["task_mask"][row].tolist() == expected.tolist()
    # A subset keeps the rows; a text without the plain words is named.
    assert tokens.take(idx).batch(np.arange(4))["input_ids"].tolist() == batch["input_ids"].tolist()
    with pytest.raises(DataError, match="text 1 does not start with 6 plain words \\(found 0\\)"):
        tokenize(minilm.tokenizer, [texts[0], "   "], plain_count=len(PLAIN), max_length=16, device="cpu")
    with pytest.raises(ValueError, match="tokenized for 6 plain tokens"):
        tokenize(minilm.tokenizer, tokens, plain_count=0, max_length=16, device="cpu")


def test_the_first_nonfinite_loss_is_kept_on_the_device_until_read():
    import torch

    watch = FirstNonFinite("cpu")
    for value in (0.7, 1e30, 0.5):
        watch.watch(torch.tensor(value, dtype=torch.float32))
    assert watch.read() is None
    for value in (1.0, math.inf, math.nan, 2.0):
        watch.watch(torch.tensor(value))
    assert watch.read() == math.inf and watch.read() == math.inf


def test_divergence_is_reported_alike_whether_checked_every_step_or_at_the_epochs_end(minilm, monkeypatch):
    settings = _settings(lr=1e30, epochs=1)
    outcomes = []
    for every in (1, customize.DIVERGENCE_CHECK_STEPS):
        monkeypatch.setattr(customize, "DIVERGENCE_CHECK_STEPS", every)
        steps = []
        with pytest.raises(Diverged) as caught:
            train_classifier(minilm, TEXTS[:6], LABELS[:6], settings, n_labels=2, seed=0,
                             progress=lambda step, total: steps.append(step))
        outcomes.append((str(caught.value), caught.value.epoch, caught.value.history, len(steps)))
    (checked, epoch, history, few), (deferred, epoch_again, history_again, all_steps) = outcomes
    assert checked == deferred and ("became nan" in checked or "became inf" in checked)
    assert epoch == epoch_again == 1 and history == history_again == []
    assert few < all_steps == 3, "checked every step, training stops at the first bad loss"


def test_a_loss_that_turns_nan_in_epoch_2_marks_that_lr_diverged_with_epoch_1_in_its_curve(minilm, monkeypatch):
    import torch

    watched = []
    watch = FirstNonFinite.watch

    def poisoned(self, loss):  # the 4th step: epoch 2 of the first lr (6 training texts, batch 2)
        watched.append(1)
        watch(self, torch.tensor(math.nan) if len(watched) == 4 else loss)

    monkeypatch.setattr(FirstNonFinite, "watch", poisoned)
    reads = []
    read = FirstNonFinite.read
    monkeypatch.setattr(FirstNonFinite, "read", lambda self: reads.append(1) or read(self))
    trained, record = select_and_train(minilm, TEXTS, LABELS, _settings(patience=2), grid=(1e-2, 3e-3), pinned=False,
                                       n_labels=2, seed=0, split_rng=np.random.default_rng(0))
    bad, ok = record["candidates"]
    assert bad["diverged"] and bad["diverged_epoch"] == 2 and "became nan in epoch 2 at lr 0.01" in bad["diverged_reason"]
    assert [c["epoch"] for c in bad["curve"]] == [1, 2] and "valid_accuracy" in bad["curve"][0]
    assert bad["curve"][1] == {"epoch": 2, "diverged": True}
    assert not ok["diverged"] and record["chosen"]["lr"] == 3e-3 == trained.settings.lr
    # The flag was read once per epoch (2 + 2), not once per step (12).
    assert len(watched) == 12 and len(reads) == 4


def test_precision_is_a_checked_training_setting(minilm):
    assert resolve_settings("prompt", "cpu").precision == "fp32"
    assert resolve_settings("prompt", "cpu", {"precision": "bf16"}).to_dict()["precision"] == "bf16"
    with pytest.raises(UsageError, match="precision must be one of fp32, bf16, got 'fp16'"):
        resolve_settings("prompt", "cpu", {"precision": "fp16"})
    defense = make_plugin(DEFENSES, "t2t", {"method": "prompt", "precision": "bf16"})
    assert defense.training_overrides()["precision"] == "bf16"
    assert make_plugin(DEFENSES, "rapt", {}).training_overrides()["precision"] is None
    with pytest.raises(UsageError, match="precision"):
        make_plugin(DEFENSES, "t2t", {"method": "prompt", "precision": "fp16"})


def _tiny_run(loaded, precision):
    import torch

    plain = PlainTokens(PLAIN, tuple(range(len(PLAIN))), 50)
    trained = train_classifier(loaded, _with_plain(TEXTS), LABELS, _settings(precision=precision, lr=1e-2, epochs=1, batch_size=4),
                               n_labels=2, seed=0, plain=plain)
    probabilities = trained.predict_proba(_with_plain(TEXTS))
    assert all(math.isfinite(v) for epoch in trained.history for v in epoch.values())
    assert probabilities.shape == (len(TEXTS), 2) and np.isfinite(probabilities).all()
    assert np.allclose(probabilities.sum(1), 1, atol=1e-5)
    # Autocast computes in bf16; the trained weights stay fp32.
    assert {p.dtype for p in trained.model.parameters()} == {torch.float32}
    return trained, probabilities


def test_bf16_trains_on_cpu_and_predicts_probabilities(minilm):
    trained, _ = _tiny_run(minilm, "bf16")
    assert trained.settings.precision == "bf16" and 0.1 < trained.history[0]["task_loss"] < 3


@pytest.mark.gpu
def test_prompt_tuning_on_cuda_in_fp32_and_bf16_gives_finite_sane_outputs():
    cuda = load_model("minilm", device="cuda")
    (fp32, p32), (bf16, p16) = (_tiny_run(cuda, precision) for precision in ("fp32", "bf16"))
    tokens = tokenize(cuda.tokenizer, TEXTS, plain_count=0, max_length=8, device="cuda")
    assert tokens.input_ids.is_cuda and tokens.batch(np.arange(3))["rows"].is_cuda
    # Same seed and data: bf16's first-epoch losses stay near fp32's (bf16 keeps ~3 significant digits).
    for name in ("task_loss", "rec_loss"):
        assert abs(fp32.history[0][name] - bf16.history[0][name]) < 0.1 * max(1.0, fp32.history[0][name])
    assert np.abs(p32 - p16).max() < 0.2

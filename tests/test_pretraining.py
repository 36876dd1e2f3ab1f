"""Privacy-adaptive pretraining (Qu et al., CIKM 2021): targets, frozen user side, a falling loss, the cache."""

from __future__ import annotations

import numpy as np
import pytest

from rapt_audit.api.errors import UnknownNameError, UsageError
from rapt_audit.encoder.models import load_model
from rapt_audit.utility.pretraining import (
    AlignedText,
    FirstPieces,
    mask_batch,
    pretrain_encoder,
    resolve_pretrain_settings,
)


@pytest.fixture(scope="module")
def loaded():
    return load_model("minilm")


def _text() -> AlignedText:
    """'the film was good' privatized twice: copy 0 changes 'film' and 'good', copy 1 only 'good'."""
    original = ("the", "film", "was", "good")
    copies = (("the", "movie", "was", "fine"), ("the", "film", "was", "nice"))
    return AlignedText(original, copies, ((0, 1, 2, 3), (0, 1, 2, 3)))


def _targets_of(batch, pieces, loaded, position_word):  # noqa: ANN001
    """{word at the masked position: {target word: weight}} of a one-text batch."""
    vocab = loaded.tokenizer.convert_ids_to_tokens
    out = {}
    for k, pos in enumerate(batch["positions"]):
        ids, weights = batch["target_ids"][k], batch["target_weights"][k]
        out[position_word[int(pos)]] = {vocab(int(i)): float(w) for i, w in zip(ids, weights) if w > 0}
    return out


@pytest.mark.parametrize("objective", ["vanilla", "denoise", "prob"])
def test_each_objective_predicts_its_own_target(loaded, objective):
    settings = resolve_pretrain_settings(objective, "smoke", {"mask_rate": 0.99, "max_predictions": 4})
    pieces = FirstPieces(loaded.tokenizer)
    batch = mask_batch(loaded.tokenizer, pieces, [_text()], [0], settings, np.random.default_rng(0))
    # Positions 1..4 hold the words of copy 0 (after [CLS]); every word is masked at this rate.
    got = _targets_of(batch, pieces, loaded, {1: "the", 2: "movie", 3: "was", 4: "fine"})
    assert set(got) == {"the", "movie", "was", "fine"}
    if objective == "vanilla":  # the privatized token at the position
        assert got["movie"] == {"movie": 1.0} and got["fine"] == {"fine": 1.0}
    elif objective == "denoise":  # the original token
        assert got["movie"] == {"film": 1.0} and got["fine"] == {"good": 1.0}
    else:  # the frequencies of every privatization of the original word
        assert got["movie"] == {"movie": 0.5, "film": 0.5} and got["fine"] == {"fine": 0.5, "nice": 0.5}
        assert got["the"] == {"the": 1.0}
    # Masked positions are [MASK], a random token or kept (BERT's 80/10/10); unmasked ones never change.
    assert batch["input_ids"].shape[1] == 6  # [CLS] four words [SEP]


def test_unaligned_units_are_never_masked(loaded):
    text = AlignedText(("a", "b"), (("x", "y", "z"),), ((0, None, 1),))
    settings = resolve_pretrain_settings("denoise", "smoke", {"mask_rate": 0.99})
    batch = mask_batch(loaded.tokenizer, FirstPieces(loaded.tokenizer), [text], [0], settings,
                       np.random.default_rng(0))
    assert 2 not in set(batch["positions"].tolist())  # 'y' (position 2) has no original to predict


def test_pretraining_lowers_the_loss_and_leaves_the_user_side_frozen(loaded):
    import torch

    rng = np.random.default_rng(3)
    words = ["the", "film", "was", "good", "bad", "a", "movie", "great", "plot", "actors", "story", "dull"]
    texts = []
    for _ in range(24):
        original = tuple(rng.choice(words, size=8))
        copies = tuple(tuple(w if rng.random() < 0.6 else str(rng.choice(words)) for w in original) for _ in range(2))
        texts.append(AlignedText(original, copies, (tuple(range(8)),) * 2))
    settings = resolve_pretrain_settings("denoise", "smoke", {"steps": 30, "batch_size": 8, "lr": 5e-4,
                                                               "perturbations": 2})
    before = loaded.model.get_input_embeddings().weight.detach().clone()
    adapted, curve = pretrain_encoder(loaded, texts, settings, seed=0)
    head = [c["mlm_loss"] for c in curve if c["phase"] == "head"]
    adapt = [c["mlm_loss"] for c in curve if c["phase"] == "adapt"]
    assert len(head) == 4 and len(adapt) == 10  # the head alone on clean text first, then the encoder too
    # Each point is the mean loss of 3 batches of 8, so it moves by itself: with the adapt phase's
    # learning rate at 0 (nothing trained) the mean of its last three points lay 10 % under that of
    # its first three at this seed, and the last point 22 % under the first. Trained, the fall was
    # 31 - 35 % (seeds 0 - 2) and the head's 33 - 48 %; a fall of less than 20 % is not learning.
    assert np.mean(adapt[-3:]) < 0.8 * np.mean(adapt[:3]), adapt
    assert head[-1] < 0.8 * head[0], head
    # The user's embedding table (what they privatize with) is the public one, bit for bit.
    assert torch.equal(adapted.get_input_embeddings().weight, before)
    assert torch.equal(loaded.model.get_input_embeddings().weight, before)  # the public model is untouched
    changed = [n for n, p in adapted.named_parameters() if not torch.equal(p, dict(loaded.model.named_parameters())[n])]
    assert changed and all("word_embeddings" not in n for n in changed)


def test_settings_are_checked():
    with pytest.raises(UnknownNameError, match="Did you mean 'denoise'"):
        resolve_pretrain_settings("denoising", "cpu")
    with pytest.raises(UsageError, match="pretrain_steps must be a positive integer"):
        resolve_pretrain_settings("vanilla", "cpu", {"steps": 0})
    paper = resolve_pretrain_settings("prob", "paper")
    assert (paper.batch_size, paper.lr, paper.max_length, paper.perturbations) == (256, 2e-5, 128, 10)


# ----- through a text defense ---------------------------------------------------------------------

SMALL = ["--profile", "smoke", "--dataset", "synthetic", "--attacks", "random_guess", "--quiet",
         "--set", "data.victim_train=40", "--set", "data.victim_test=30",
         "--set", "data.attacker_train=40", "--set", "data.attacker_valid=20"]


@pytest.fixture()
def corpus(warm_cache, tmp_path, monkeypatch):
    """A small public corpus and a private cache folder for the adapted encoders."""
    monkeypatch.setenv("RAPT_AUDIT_CACHE", str(warm_cache))
    path = tmp_path / "public.txt"
    path.write_text("\n".join(["the committee approved the new budget after a long debate",
                               "rain is expected across the north of the country tomorrow",
                               "the museum opened a new wing for modern art last spring",
                               "she played the violin in the city orchestra for ten years"] * 3), encoding="utf-8")
    return path


def test_the_adapted_encoder_is_cached_and_reused_and_the_release_is_unchanged(corpus, tmp_path, monkeypatch):
    import json

    from rapt_audit.cli import main
    from rapt_audit.defenses import _pretraining

    args = ["run", "--defense", "t2t", "--set", "method=prompt", "--set", "pretrain=denoise",
            "--set", f"pretrain_corpus={corpus}", "--set", "pretrain_steps=3", "--no-release-cache", *SMALL]
    assert main([*args, "--out", str(tmp_path / "first")]) == 0
    assert len(list((tmp_path / "cache" / "pretrained").glob("*.pt"))) == 1

    def no_training(*args, **kwargs):  # noqa: ANN002, ANN003
        raise AssertionError("the cached adapted encoder should have been reused")

    monkeypatch.setattr(_pretraining, "pretrain_encoder", no_training)
    assert main([*args, "--out", str(tmp_path / "second")]) == 0
    first, second = (json.loads((tmp_path / d / "result.json").read_text()) for d in ("first", "second"))
    trained, reused = (r["defense"]["release_meta"]["customization"]["pretraining"] for r in (first, second))
    assert trained == reused and trained["corpus"] == "public.txt" and trained["objective"] == "denoise"
    assert first["utility"] == second["utility"]  # the same adapted weights
    # Pretraining changes the service's model, never what is released: the attacks see the same text.
    assert main(["run", "--defense", "t2t", "--set", "method=prompt", *SMALL, "--out", str(tmp_path / "none")]) == 0
    plain = json.loads((tmp_path / "none" / "result.json").read_text())
    assert plain["attacks"] == first["attacks"]
    assert plain["defense"]["release_meta"]["verbatim"] == first["defense"]["release_meta"]["verbatim"]
    # The report says which service pretrained, and that the attacks are not affected.
    page = tmp_path / "report.html"
    assert main(["report", str(tmp_path / "first"), str(tmp_path / "none"), "--out", str(page)]) == 0
    html = page.read_text(encoding="utf-8")
    assert "Privacy-adaptive pretraining" in html and "denoise MLM, 3 steps on public.txt" in html
    assert "every attack sees the same release" in html


@pytest.mark.parametrize(("args", "message"), [
    (["--defense", "t2t", "--set", "pretrain=vanilla"], "method=bow uses none"),
    (["--defense", "cape", "--set", "pretrain=vanilla"], "releases vectors, not text"),
    (["--defense", "pct2t", "--set", "method=prompt", "--set", "pretrain=vanilla", "--set", "pretrain_steps=0"],
     "pretrain_steps"),
    (["--defense", "t2t", "--set", "method=prompt", "--set", "pretrain=denoising"], "Did you mean 'denoise'"),
])
def test_pretraining_misuse_is_refused_with_the_reason(args, message, tmp_path, capsys):
    from rapt_audit.cli import main

    assert main(["run", *args, *SMALL, "--out", str(tmp_path / "out")]) == 2
    assert message in capsys.readouterr().err


def test_a_missing_or_empty_corpus_is_named(corpus, tmp_path, capsys):
    from rapt_audit.cli import main

    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n", encoding="utf-8")
    for path, message in ((tmp_path / "absent.txt", "does not exist"), (empty, "holds no text")):
        code = main(["run", "--defense", "t2t", "--set", "method=prompt", "--set", "pretrain=vanilla",
                     "--set", f"pretrain_corpus={path}", *SMALL, "--out", str(tmp_path / "out")])
        assert code != 0
        err = capsys.readouterr().err
        assert str(path) in err and message in err

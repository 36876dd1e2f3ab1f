"""CAPE, DPNR and Split-and-Denoise: noise laws, gradient reversal, dropout rate, clipping, denoising,
seeds, and the errors users see for bad parameters or data."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from rapt_audit.api.errors import DataError, PrivacyParameterError
from rapt_audit.api.params import make_plugin
from rapt_audit.api.plugins import DEFENSES, load
from rapt_audit.api.types import Record
from rapt_audit.defenses._representation import laplace_rows, minmax_rows
from rapt_audit.pipeline.context import RunContext

load()


def _defense(name: str, **args):
    smoke = dict(DEFENSES.get(name).profiles.get("smoke", {}))
    return make_plugin(DEFENSES, name, {**smoke, **args})


# -- Laplace noise ---------------------------------------------------------------------------


def test_laplace_rows_have_the_right_scale_and_are_fresh_per_example_and_dimension():
    ctx = RunContext(seed=3)
    n, d, epsilon = 300, 40, 2.0
    noise = laplace_rows(np.zeros((n, d)), [f"u{i}" for i in range(n)], epsilon=epsilon, sensitivity=1.0,
                         ctx=ctx, key=("test",))
    # The whole sample against Laplace(0, 1/epsilon): a wrong scale (e.g. epsilon instead of 1/epsilon,
    # or a sensitivity of d) is rejected with overwhelming power at n*d = 12,000.
    assert stats.kstest(noise.ravel(), "laplace", args=(0.0, 1.0 / epsilon)).pvalue > 1e-3
    assert stats.kstest(noise.ravel(), "laplace", args=(0.0, 1.2 / epsilon)).pvalue < 1e-6
    # Fresh per example: no two rows share noise; per dimension: columns are uncorrelated.
    assert len({row.tobytes() for row in noise}) == n
    corr = np.corrcoef(noise.T)[np.triu_indices(d, 1)]
    assert np.abs(corr).max() < 0.3
    # Keyed by uid: the same record gets the same draw in any batch.
    again = laplace_rows(np.zeros((1, d)), ["u7"], epsilon=epsilon, sensitivity=1.0, ctx=ctx, key=("test",))
    assert np.array_equal(again[0], noise[7])


def test_dpnr_release_noise_is_laplace_with_scale_sensitivity_over_epsilon(ctx, synthetic_splits):
    records = synthetic_splits.victim_test
    noisy = _defense("dpnr", epsilon=4.0).release(records, ctx=ctx).sequence_embeddings.astype(np.float64)
    clean = _defense("dpnr", epsilon=math.inf).release(records, ctx=ctx).sequence_embeddings.astype(np.float64)
    assert clean.min() >= 0.0 and clean.max() <= 1.0 + 1e-6  # per-example min-max normalised
    assert stats.kstest((noisy - clean).ravel(), "laplace", args=(0.0, 0.25)).pvalue > 1e-3


def test_minmax_rows_maps_each_row_to_unit_interval():
    x = np.array([[1.0, 3.0, 2.0], [5.0, 5.0, 5.0], [-2.0, 0.0, 2.0]])
    np.testing.assert_allclose(minmax_rows(x), [[0.0, 1.0, 0.5], [0.0, 0.0, 0.0], [0.0, 0.5, 1.0]])


# -- CAPE ------------------------------------------------------------------------------------


def test_gradient_reversal_multiplies_the_gradient_by_minus_lambda():
    import torch

    from rapt_audit.defenses._adversarial import reverse_gradient

    x = torch.randn(4, 3, requires_grad=True)
    out = reverse_gradient(x, 1.5)
    assert torch.equal(out, x)
    (out * torch.arange(12.0).reshape(4, 3)).sum().backward()
    assert torch.allclose(x.grad, -1.5 * torch.arange(12.0).reshape(4, 3))


def test_cape_adversary_pushes_the_client_projection_away_from_the_attribute():
    """With lam > 0 the projected representation leaks less of the attribute to a fresh probe."""
    from sklearn.linear_model import LogisticRegression

    from rapt_audit.defenses._adversarial import train_cape

    rng = np.random.default_rng(0)
    n, d = 800, 16
    attr, label = rng.integers(0, 2, n), rng.integers(0, 2, n)
    x = rng.normal(size=(n, d))
    x[:, 0] += 2 * (2 * attr - 1)  # the attribute is linearly decodable from dimension 0
    x[:, 1] += 2 * (2 * label - 1)  # the task from dimension 1
    scores = {}
    for lam in (0.0, 3.0):
        model = train_cape(x[:600], label[:600], attr[:600], n_classes=2, n_values=2, noise_scale=0.0,
                           adversary_weight=lam, hidden=32, dropout=0.0, lr=1e-2, adversary_lr=1e-2, epochs=30,
                           batch_size=64, seed=1)
        r = model.project(x, "cpu")
        probe = LogisticRegression(max_iter=2000)
        scores[lam] = (probe.fit(r[:600], attr[:600]).score(r[600:], attr[600:]),
                       LogisticRegression(max_iter=2000).fit(r[:600], label[:600]).score(r[600:], label[600:]))
    assert scores[0.0][0] > 0.9                      # without the adversary the attribute stays
    assert scores[3.0][0] < scores[0.0][0] - 0.1     # reversal removes much of it
    assert scores[3.0][1] > 0.9                      # while the task survives


def test_cape_without_the_attribute_names_it(ctx):
    records = [Record(uid=f"x/{i}", text=f"a short text number {i}", label=i % 2) for i in range(20)]
    with pytest.raises(DataError, match=r"'gender'.*trustpilot"):
        _defense("cape").fit(records, ctx=ctx)
    with pytest.raises(DataError, match="'age'"):
        _defense("cape", attribute="age").fit(records, ctx=ctx)
    # lam = 0 trains no adversary, so the attribute is not needed (documented, not silent).
    assert _defense("cape", lam=0).fit(records, ctx=ctx).release(records[:3], ctx=ctx).sequence_embeddings.shape[0] == 3


def test_cape_fit_is_reproducible(ctx, synthetic_splits):
    train, test = synthetic_splits.victim_train[:60], synthetic_splits.victim_test[:20]
    a = _defense("cape").fit(train, ctx=ctx).release(test, ctx=ctx).sequence_embeddings
    b = _defense("cape").fit(train, ctx=ctx).release(test, ctx=ctx).sequence_embeddings
    other = RunContext(seed=ctx.seed + 1, profile="smoke")
    c = _defense("cape").fit(train, ctx=other).release(test, ctx=other).sequence_embeddings
    assert np.array_equal(a, b) and not np.allclose(a, c)


# -- DPNR ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mu", [0.0, 0.1, 0.5])
def test_dpnr_word_dropout_rate_is_what_was_asked(mu):
    ctx = RunContext(seed=11)
    records = [Record(uid=f"r/{i}", text=" ".join(f"w{j}" for j in range(20))) for i in range(500)]
    texts, words, dropped = _defense("dpnr", mu=mu).dropped_texts(records, ctx=ctx)
    assert words == 10_000 and sum(len(t.split()) for t in texts) == words - dropped
    if mu == 0.0:
        assert dropped == 0
    else:  # binomial: within 4 standard deviations of mu * words
        assert abs(dropped - mu * words) < 4 * math.sqrt(words * mu * (1 - mu))


def test_dpnr_seeds_reproduce_and_differ(ctx, synthetic_splits):
    test = synthetic_splits.victim_test[:20]
    a = _defense("dpnr").release(test, ctx=ctx).sequence_embeddings
    b = _defense("dpnr").release(test, ctx=RunContext(seed=ctx.seed, profile="smoke")).sequence_embeddings
    c = _defense("dpnr").release(test, ctx=RunContext(seed=ctx.seed + 1, profile="smoke")).sequence_embeddings
    assert np.array_equal(a, b) and not np.allclose(a, c)


# -- SnD -------------------------------------------------------------------------------------


def test_snd_clipping_bounds_every_norm_and_keeps_the_clipped_noise():
    from rapt_audit.defenses._denoiser import privatize_tokens

    rng = np.random.default_rng(0)
    clean = rng.normal(size=(500, 32)).astype(np.float32) * 0.1  # norms ~0.57, all inside the bound
    bound = 1.5
    upload, noise = privatize_tokens(clean, eta=5.0, bound=bound, rng=rng)  # heavy noise: most rows clipped
    norms = np.linalg.norm(upload, axis=1)
    assert norms.max() <= bound * (1 + 1e-5) and (norms > 0.99 * bound).mean() > 0.9
    np.testing.assert_allclose(upload - clean, noise, atol=1e-6)
    # Rows already inside the bound are left alone.
    inside, _ = privatize_tokens(clean, eta=math.inf, bound=bound, rng=rng)
    np.testing.assert_array_equal(inside, clean)


def test_snd_release_is_clipped_to_the_vocabulary_bound(ctx, synthetic_splits, data_dir):
    defense = _defense("snd", eta=20.0)
    release = defense.release(synthetic_splits.victim_test[:30], ctx=ctx)
    bound = defense.clip_bound(ctx)
    assert max(np.linalg.norm(t, axis=1).max() for t in release.token_embeddings if len(t)) <= bound * (1 + 1e-5)
    assert release.sequence_embeddings.shape == (30, 384)
    other = RunContext(seed=ctx.seed + 1, profile="smoke")
    assert not np.allclose(release.token_embeddings[0], defense.release(synthetic_splits.victim_test[:30],
                                                                        ctx=other).token_embeddings[0])


@pytest.mark.slow  # ~40 s on 2 CPU cores: encodes 600 public sentences and trains a small transformer
def test_snd_denoiser_lowers_mse_on_held_out_public_text(tmp_path, data_dir):
    from rapt_audit.data import load_dataset
    from rapt_audit.defenses._denoiser import denoise, mse_rows
    from rapt_audit.encoder.encode import cached_pooled
    from rapt_audit.scoring.stats import bootstrap_mean

    ctx = RunContext(seed=5, profile="smoke", cache_dir=tmp_path)
    defense = _defense("snd", eta=200.0, public_size=300, denoiser_epochs=6, d_model=64, d_ff=128)
    fit = defense.fit([], ctx=ctx).denoiser(ctx)
    # Held out: public sentences the denoiser was neither trained nor validated on.
    used = {r.uid for r in defense.public_records(ctx, [])}
    held_out = [r for r in load_dataset("wikitext2", data_dir).records if r.uid not in used
                and len(r.text.split()) >= 3][::50][:150]
    batch = defense.exchange(held_out, ctx=ctx)
    clean = cached_pooled(ctx, held_out, tag="clean")
    gain = mse_rows(batch.output, clean) - mse_rows(denoise(fit.model, batch), clean)
    assert bootstrap_mean(gain, rng=np.random.default_rng(0)).ci_low > 0, (fit.valid_mse_noisy, fit.valid_mse_denoised)


def test_snd_never_trains_on_victim_data(ctx, data_dir):
    from rapt_audit.data import load_dataset

    victim = list(load_dataset("wikitext2", data_dir).records[:50])
    with pytest.raises(DataError, match="public text only"):
        _defense("snd").public_records(ctx, victim)


# -- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize("name, args", [
    ("cape", {"epsilon": 0}), ("cape", {"epsilon": -1.0}), ("cape", {"epsilon": float("nan")}),
    ("cape", {"lam": -0.5}), ("dpnr", {"epsilon": 0.0}), ("dpnr", {"mu": -0.1}), ("dpnr", {"mu": 1.0}),
    ("dpnr", {"mu": 1.5}), ("snd", {"eta": 0}), ("snd", {"eta": -3.0}),
])
def test_bad_privacy_parameters_are_rejected_with_their_name(name, args):
    key = next(iter(args))
    with pytest.raises(PrivacyParameterError, match=key):
        _defense(name, **args)


def test_snd_denoiser_is_stored_and_read_back_by_a_later_run_at_the_same_setting(warm_cache, data_dir, monkeypatch):
    """A benchmark's SST-2 and Trustpilot cells of one setting and seed share the denoiser (public text only):
    a new run reads the very weights back without training; another η trains its own."""
    import torch

    from rapt_audit.defenses import _denoiser

    def context():
        return RunContext(seed=5, profile="smoke", cache_dir=warm_cache, data_dir=str(data_dir))

    small = {"public_size": 60, "denoiser_epochs": 1, "d_model": 32, "d_ff": 64}
    first = _defense("snd", eta=100.0, **small).denoiser(context())
    trained = []
    real = _denoiser.train_denoiser
    monkeypatch.setattr(_denoiser, "train_denoiser", lambda *a, **k: trained.append(1) or real(*a, **k))
    again = _defense("snd", eta=100.0, **small).denoiser(context())
    assert trained == []
    other = _defense("snd", eta=50.0, **small).denoiser(context())
    assert trained == [1]
    assert (again.best_epoch, again.valid_mse_denoised, again.history) == (first.best_epoch, first.valid_mse_denoised,
                                                                          first.history)
    for name, tensor in first.model.state_dict().items():
        assert torch.equal(tensor, again.model.state_dict()[name]), name
    assert other.valid_mse_noisy != first.valid_mse_noisy
    assert len(list((warm_cache / "defenses").glob("*.pt"))) == 2

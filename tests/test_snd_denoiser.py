"""SnD's denoiser on the victim's kind of text (issue 28 item 2): after training on public text only,
the denoised output embedding of held-out SST-2 sentences is closer to the clean one than the
server's noisy output, in MSE and in cosine."""

from __future__ import annotations

import numpy as np

from rapt_audit.api.params import make_plugin
from rapt_audit.api.plugins import DEFENSES, load
from rapt_audit.pipeline.context import RunContext

load()


def test_snd_denoiser_brings_sst2_embeddings_closer_to_the_clean_ones(tmp_path, data_dir):
    # ~15 s on one core: 600 public sentences and 150 SST-2 sentences through MiniLM, a one-epoch
    # transformer. At HEAD before the fix (positions at N(0, 1) burying the inputs, no linear path)
    # the trained denoiser moved SST-2 embeddings *away* from the clean ones in cosine.
    from rapt_audit.data import load_dataset
    from rapt_audit.defenses._denoiser import cosine_rows, mse_rows
    from rapt_audit.encoder.encode import cached_pooled
    from rapt_audit.scoring.stats import bootstrap_mean

    ctx = RunContext(seed=11, profile="smoke", cache_dir=tmp_path, data_dir=data_dir)
    smoke = dict(DEFENSES.get("snd").profiles["smoke"])
    defense = make_plugin(DEFENSES, "snd", {**smoke, "eta": 100.0, "public_size": 600, "denoiser_epochs": 1})
    records = [r for r in load_dataset("sst2", data_dir).records if len(r.text.split()) >= 3]
    test = [records[i] for i in np.random.default_rng(0).choice(len(records), size=150, replace=False)]
    fit = defense.fit(test[:0], ctx=ctx)._fit
    assert fit.valid_mse_denoised < fit.valid_mse_noisy  # held-out public text
    noisy, denoised = defense.exchange(test, ctx=ctx).output, defense.denoised(test, ctx=ctx)
    clean = cached_pooled(ctx, test, tag="clean")
    rng = np.random.default_rng(0)
    mse_gain = bootstrap_mean(mse_rows(noisy, clean) - mse_rows(denoised, clean), rng=rng)
    cos_gain = bootstrap_mean(cosine_rows(denoised, clean) - cosine_rows(noisy, clean), rng=rng)
    assert mse_gain.ci_low > 0 and cos_gain.ci_low > 0, (mse_gain, cos_gain, fit.best_epoch)

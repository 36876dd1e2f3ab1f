"""The word-level sanitizers' laws against their closed forms (SanText/SanText+, CusText/CusText+).

Each law is checked as the dχ sampler is (tests/battery.py): draws of the defense's own code, a Pearson χ²
goodness-of-fit against the paper's closed form computed here independently (float64 distances from
differences), rejected at ``ALPHA`` = 1e-6 with a fixed seed per test. Every check is shown to reject a
plausible wrong implementation (a "mutant") on as many draws, so none of them can pass by lack of power.
SanText+'s mutant is the other reading of its public code's probability matrix (xiangyue9607/SanText
issue #3): the law of a sensitive word over *all* words instead of over the sensitive ones.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from rapt_audit.api.params import make_plugin
from rapt_audit.api.plugins import DEFENSES, load
from rapt_audit.defenses._word_mechanism import WordTable, public_frequency_order, word_table
from rapt_audit.defenses.custext import customized_sets
from rapt_audit.defenses.santext import sensitive_rows
from rapt_audit.mechanisms.exponential import sample_rows
from tests.battery import (ALPHA, Z_CRIT, categorical_chi2_pvalue, describe_seed, radius_ks_pvalue,
                           random_projection_ks_pvalue, rng_for, unit_vector)

load()
DRAWS = 100_000


def exponential_law(x: np.ndarray, outputs: np.ndarray, scale: float) -> np.ndarray:
    """``softmax(−scale · ‖x − y‖)`` over the rows y of ``outputs`` (float64, from differences)."""
    distance = np.linalg.norm(np.asarray(outputs, np.float64) - np.asarray(x, np.float64), axis=1)
    logits = -scale * distance
    weights = np.exp(logits - logits.max())
    return weights / weights.sum()


def draws_of(defense, word: str, ctx, test_id: str) -> np.ndarray:
    """Rows (into the word table) of ``DRAWS`` releases of ``word`` by the defense's own code."""

    released, _ = defense.release_words([word] * DRAWS, epsilon=defense.epsilon, rng=rng_for(test_id), ctx=ctx)
    table = word_table(ctx)
    return np.array([table.row_of.get(w, -1) for w in released], dtype=np.int64)


# ------------------------------------------------------------------------------- the sampling core


def test_sample_rows_follows_each_rows_softmax_and_rejects_a_tempered_law():
    rng = rng_for("exponential/sample_rows")
    log_weights = 2.0 * rng.standard_normal((3, 40))
    log_weights[1, ::3] = -np.inf  # excluded outputs are never drawn
    owners = np.repeat(np.arange(3), 60_000)
    drawn = sample_rows(log_weights, owners, rng.random(owners.size))
    tempered = sample_rows(1.15 * log_weights, owners, rng.random(owners.size))
    for row in range(3):
        law = np.exp(log_weights[row] - log_weights[row].max())
        law /= law.sum()
        p_good = categorical_chi2_pvalue(drawn[owners == row], law)
        p_bad = categorical_chi2_pvalue(tempered[owners == row], law)
        assert p_good >= ALPHA and p_bad < ALPHA, (row, p_good, p_bad, describe_seed("exponential/sample_rows"))


# ------------------------------------------------------------------------------------- SanText(+)


def test_santext_law_is_the_exponential_mechanism_over_the_vocabulary(ctx):

    defense = make_plugin(DEFENSES, "santext", {"epsilon": 10.0})
    table = word_table(ctx)
    x = table.row_of["good"]
    law = exponential_law(table.vectors[x], table.vectors, defense.epsilon / 2)
    drawn = draws_of(defense, "good", ctx, "santext/good")
    assert 0.05 < law[x] < 0.95  # a law spread enough for the test to say something
    assert categorical_chi2_pvalue(drawn, law) >= ALPHA, describe_seed("santext/good")
    # The law of another ε (a scale error, ε vs ε/2) is rejected on as many draws.
    assert categorical_chi2_pvalue(drawn, exponential_law(table.vectors[x], table.vectors, defense.epsilon)) < ALPHA


def santext_plus_law(table, sensitive: np.ndarray, x: int, *, epsilon: float, p: float) -> np.ndarray:
    """SanText+'s law of input row x over every word (the paper's definition, closed form).

    Outputs are the sensitive words, with ``C_x·exp(−ε·d(x, y)/2)`` normalised over them for the input x; a
    non-sensitive x is also kept with probability 1 − p and replaced by that law with probability p.
    """
    law = np.zeros(len(table.words))
    law[sensitive] = exponential_law(table.vectors[x], table.vectors[sensitive], epsilon / 2)
    if x not in set(sensitive.tolist()):
        law *= p
        law[x] += 1 - p
    return law


def issue_3_reading(table, x: int, *, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """The other reading of the public probability matrix (issue #3): a sensitive word's row over all words."""
    log_weights = -0.5 * epsilon * np.linalg.norm(table.vectors - table.vectors[x], axis=1)
    return sample_rows(log_weights[None, :], np.zeros(DRAWS, dtype=np.int64), rng.random(DRAWS))


def test_santext_plus_follows_the_papers_definition_not_the_other_reading_of_issue_3(ctx):

    defense = make_plugin(DEFENSES, "santext", {"epsilon": 10.0, "plus": True, "sensitive": 0.9, "p": 0.3})
    table = word_table(ctx)
    sensitive = sensitive_rows(ctx, table, 0.9)
    assert sensitive.size == int(np.ceil(0.9 * len(table.words)))
    frequent = int(public_frequency_order(ctx, table)[0])  # the most frequent public word: non-sensitive
    rare = table.row_of["doctor"] if table.row_of["doctor"] in set(sensitive.tolist()) else int(sensitive[0])
    for x in (rare, frequent):
        test_id = f"santext_plus/{table.words[x]}"
        drawn = draws_of(defense, table.words[x], ctx, test_id)
        law = santext_plus_law(table, sensitive, x, epsilon=10.0, p=0.3)
        assert categorical_chi2_pvalue(drawn, law) >= ALPHA, describe_seed(test_id)
    # A sensitive word is never released as a non-sensitive one; the other reading does so, and is rejected.
    law = santext_plus_law(table, sensitive, rare, epsilon=10.0, p=0.3)
    mutant = issue_3_reading(table, rare, epsilon=10.0, rng=rng_for("santext_plus/issue_3"))
    assert not np.isin(mutant, sensitive).all()
    assert categorical_chi2_pvalue(mutant, law) < ALPHA


def test_santext_releases_reproduce_and_infinite_epsilon_is_the_identity(ctx):
    texts = ["The doctor in London gave her good money.", "I loved this movie, it's wonderful!"]
    defense = make_plugin(DEFENSES, "santext", {"epsilon": 10.0, "plus": True})
    first, count = defense.privatize(texts, rng=np.random.default_rng(3), ctx=ctx)
    again, _ = defense.privatize(texts, rng=np.random.default_rng(3), ctx=ctx)
    assert first == again and len(first) == 2 and count.perturbed == 18 and 0 < count.replaced <= 18
    plain = make_plugin(DEFENSES, "santext", {"epsilon": float("inf")})
    assert plain.privatize(texts, rng=np.random.default_rng(3), ctx=ctx)[0] == texts


@pytest.mark.parametrize("params", [{"sensitive": 0.0}, {"p": 1.5}, {"epsilon": 0.0}, {"epsilon": float("nan")}])
def test_santext_refuses_out_of_range_parameters(params):
    with pytest.raises(ValueError):
        make_plugin(DEFENSES, "santext", params)


# -------------------------------------------------------------------------------------- CusText(+)


def greedy_sets_reference(vectors: np.ndarray, order: np.ndarray, k: int) -> list[list[int]]:
    """CusText's conservative mapping written plainly: each unmapped word in order with its k − 1 nearest unmapped."""
    free = np.ones(len(vectors), dtype=bool)
    sets = []
    for leader in order:
        if free[leader]:
            distance = np.linalg.norm(vectors - vectors[leader], axis=1)
            distance[~free] = np.inf
            nearest = np.lexsort((np.arange(len(vectors)), distance))[:min(k, int(free.sum()))]
            sets.append(nearest.tolist())
            free[nearest] = False
    return sets


def test_customized_sets_are_the_greedy_partition():
    rng = rng_for("custext/sets")
    vectors = rng.standard_normal((503, 8))
    table = WordTable(tuple(map(str, range(503))), vectors, 0.5 * (vectors**2).sum(axis=1), {}, None)
    order = rng.permutation(503)
    sets = customized_sets(table, order, 20, batch=16)
    assert [[r for r in row if r >= 0] for row in sets.members.tolist()] == greedy_sets_reference(vectors, order, 20)
    assert all(r in sets.members[sets.set_of[r]] for r in range(503))  # each word's set holds it
    assert np.array_equal(np.sort(sets.members[sets.members >= 0]), np.arange(503))  # a partition


def custext_law(x: np.ndarray, members: np.ndarray, epsilon: float) -> np.ndarray:
    """``softmax(ε·u/2)``, ``u = −(d − d_min)/(d_max − d_min)`` over the set's member vectors (closed form)."""
    distance = np.linalg.norm(members - x, axis=1)
    return exponential_law(np.zeros(1), ((distance - distance.min()) / np.ptp(distance))[:, None], epsilon / 2)


def test_custext_law_is_the_exponential_mechanism_over_the_customized_set(ctx):
    defense = make_plugin(DEFENSES, "custext", {"epsilon": 3.0})
    table, sets = word_table(ctx), defense.sets(ctx)
    for word in ("good", "zorblax"):  # a vocabulary word, and one held only as pieces (its nearest word's set)
        test_id = f"custext/{word}"
        vector = table.engine.word_vectors([word])[0].astype(np.float64)
        nearest = table.row_of.get(word, int(np.argmin(np.linalg.norm(table.vectors - vector, axis=1))))
        members = sets.members[sets.set_of[nearest]]
        members = members[members >= 0]
        drawn = draws_of(defense, word, ctx, test_id)
        assert np.isin(drawn, members).all(), describe_seed(test_id)  # the support: its own set, never another
        column = np.searchsorted(np.sort(members), drawn)
        law = custext_law(vector, table.vectors[np.sort(members)], 3.0)
        assert categorical_chi2_pvalue(column, law) >= ALPHA, describe_seed(test_id)
        # Without the min-max normalisation (u = −d, as if Δu were the distance) the law is another one: rejected.
        raw = exponential_law(vector, table.vectors[np.sort(members)], 1.5)
        assert categorical_chi2_pvalue(column, raw) < ALPHA


def test_custext_plus_keeps_stop_words_and_custext_does_not(ctx):
    texts = ["The doctor and her money were in London."]
    plus = make_plugin(DEFENSES, "custext", {"epsilon": 1.0, "plus": True})
    released, count = plus.privatize(texts, rng=np.random.default_rng(5), ctx=ctx)
    kept = released[0].split()
    assert [kept[i] for i in (0, 2, 3, 5, 6)] == ["The", "and", "her", "were", "in"]
    assert count.passed == 5 and count.perturbed == 4  # doctor, money, London, "."
    plain, plain_count = make_plugin(DEFENSES, "custext", {"epsilon": 1.0}).privatize(
        texts, rng=np.random.default_rng(5), ctx=ctx)
    assert plain_count.passed == 0 and plain_count.perturbed == 9 and plain_count.replaced > 4


# --------------------------------------------------------------------------------------------- TEM


def test_tem_law_is_the_exponential_mechanism_with_the_distance_truncated_at_gamma(ctx):
    defense = make_plugin(DEFENSES, "tem", {"epsilon": 12.0, "gamma": 1.2})
    table = word_table(ctx)
    x = table.row_of["good"]
    distance = np.linalg.norm(table.vectors - table.vectors[x], axis=1)
    law = exponential_law(np.zeros(1), np.minimum(distance, 1.2)[:, None], 6.0)
    drawn = draws_of(defense, "good", ctx, "tem/good")
    assert 0.05 < law[x] < 0.95 and (distance > 1.2).mean() > 0.5  # the truncation bites for most words
    assert categorical_chi2_pvalue(drawn, law) >= ALPHA, describe_seed("tem/good")
    # Without the truncation (SanText's law at the same ε) the draws are rejected.
    assert categorical_chi2_pvalue(drawn, exponential_law(np.zeros(1), distance[:, None], 6.0)) < ALPHA


def test_tem_default_threshold_follows_epsilon():
    from rapt_audit.defenses.tem import tem_threshold

    assert tem_threshold(2.0, 1000, 0.001) == pytest.approx(np.log(0.999 * 1000 / 0.001))
    assert tem_threshold(4.0, 1000, 0.001) == pytest.approx(tem_threshold(2.0, 1000, 0.001) / 2)


# --------------------------------------------------------------------------- Vickrey and Mahalanobis

TEXTS = ["The doctor in London gave her good money.", "I loved this movie, it's wonderful! Zorblax"]


@pytest.mark.parametrize("name, params", [("vickrey", {"t": 0.0}), ("mahalanobis", {"lam": 0.0})])
def test_the_noisy_nearest_word_mechanisms_reduce_to_word_level_t2t(ctx, name, params):
    """Vickrey at t = 0 and Mahalanobis at λ = 0 are T2T at word level: the same noise and the same decoding."""
    t2t = make_plugin(DEFENSES, "t2t", {"eta": 60.0, "unit": "word"})
    defense = make_plugin(DEFENSES, name, {"epsilon": 60.0, **params})
    expected, _ = t2t.privatize(TEXTS, eta=60.0, rng=np.random.default_rng(11), ctx=ctx)
    released, count = defense.privatize(TEXTS, rng=np.random.default_rng(11), ctx=ctx)
    assert released == expected and 0 < count.replaced < count.perturbed


def test_vickrey_releases_the_first_nearest_with_its_stated_probability(ctx):
    from rapt_audit.defenses._word_mechanism import nearest_two_of_noisy
    from rapt_audit.defenses.vickrey import first_probability

    test_id = "vickrey/good"
    # ε = 300: noise of mean norm 1.3, so d₁ and d₂ differ enough for the rule to matter (at ε = 60, d₁ ≈ d₂).
    defense = make_plugin(DEFENSES, "vickrey", {"epsilon": 300.0, "t": 0.3})
    table = word_table(ctx)
    n = 2_000  # the swapped rule is then ~10 standard deviations off (12 measured at 3,000), far past Z_CRIT
    released, _ = defense.release_words(["good"] * n, epsilon=300.0, rng=rng_for(test_id), ctx=ctx)
    # The same noise again (the defense draws the noise first, then one uniform per word).
    rows, distances = nearest_two_of_noisy(table, ["good"] * n, epsilon=300.0, rng=rng_for(test_id))
    released_rows = np.array([table.row_of[w] for w in released])
    assert ((released_rows == rows[:, 0]) | (released_rows == rows[:, 1])).all()
    first = (released_rows == rows[:, 0]).sum()

    def z(p: np.ndarray) -> float:  # Poisson-binomial count of first picks against its mean
        return float((first - p.sum()) / np.sqrt((p * (1 - p)).sum()))

    assert abs(z(first_probability(distances, 0.3))) < Z_CRIT, describe_seed(test_id)
    assert abs(z(first_probability(distances[:, ::-1], 0.3))) > Z_CRIT  # d₁ and d₂ swapped: rejected


def test_mahalanobis_noise_whitened_by_its_shape_is_dchi_noise(ctx):
    from rapt_audit.defenses._word_mechanism import shaped_noise
    from rapt_audit.defenses.mahalanobis import regularized_covariance_sqrt

    table = word_table(ctx)
    d = table.vectors.shape[1]
    shape = regularized_covariance_sqrt(table.vectors, 0.5)
    covariance = np.cov(table.vectors, rowvar=False)
    target = 0.5 * covariance * d / np.trace(covariance) + 0.5 * np.eye(d)
    assert np.allclose(shape, shape.T) and np.allclose(shape @ shape, target, atol=1e-10)
    noise = shaped_noise(10_000, d, 80.0, rng_for("mahalanobis/noise"), shape=shape).astype(np.float64)
    whitened = noise @ np.linalg.inv(shape)
    widest = np.linalg.eigh(target)[1][:, -1]  # the direction the noise is stretched most along
    for u in (unit_vector(d), widest):
        assert random_projection_ks_pvalue(whitened, u) >= ALPHA, describe_seed("mahalanobis/noise")
    assert radius_ks_pvalue(whitened, d, 80.0) >= ALPHA, describe_seed("mahalanobis/noise")
    # The noise itself is elliptical, not dχ: the projection test rejects it (so it can tell the two apart).
    assert random_projection_ks_pvalue(noise, widest) < ALPHA


def test_calibrate_reports_each_word_mechanisms_replacement_against_its_epsilon(capsys, warm_cache):
    from rapt_audit.cli import main

    assert main(["calibrate", "--defense", "santext", "--eta", "10,20", "--profile", "smoke", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    low, high = (row["replacement"]["value"] for row in doc["rows"])
    assert doc["parameter"] == "epsilon" and doc["reference"] is None and low > high  # more ε, fewer replacements
    assert all(row["rapt_table_iii_bert_base"] is None for row in doc["rows"])  # RAPT's η table is not theirs
    assert main(["calibrate", "--defense", "custext", "--eta", "3", "--profile", "smoke"]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[0] == "epsilon"


def test_a_replacement_target_calibrates_epsilon_on_public_text_and_is_read_back(warm_cache):
    from rapt_audit.data.public import public_corpus
    from rapt_audit.pipeline.context import RunContext

    ctx = RunContext(seed=3, profile="smoke", device="cpu", cache_dir=warm_cache)
    defense = make_plugin(DEFENSES, "santext", {"replacement": 0.5})
    epsilon = defense.effective_epsilon(ctx)
    texts = public_corpus(ctx)[1]  # the sentences it was calibrated on (not all of WikiText-2 when the data is here)
    count = defense.replacement_count(texts, eta=epsilon, rng=np.random.default_rng(99), ctx=ctx)  # fresh noise
    # Bisection stops within 2⁻¹² of the bracket in log ε; the band is ~5 binomial standard deviations wide.
    assert count.perturbed > 400 and abs(count.rate - 0.5) < 5 * np.sqrt(0.25 / count.perturbed) + 0.02, count.rate
    facts = defense.mechanism_facts(count, ctx)
    assert facts["calibrated_epsilon"] == epsilon == defense.privacy_level(ctx) and facts["target_replacement"] == 0.5
    again = RunContext(seed=3, profile="smoke", device="cpu", cache_dir=warm_cache)
    assert make_plugin(DEFENSES, "santext", {"replacement": 0.5}).effective_epsilon(again) == epsilon
    assert again.tallies()["calibration"] == {"hit": 1, "miss": 0}

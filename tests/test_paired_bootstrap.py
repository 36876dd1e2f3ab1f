"""Privacy at matched utility, paired (issue #38 item 3): the hierarchical bootstrap over seeds and records.

Each test builds results that keep per-record outcomes, as the runner writes them, and checks a property the
paired reading must have and the unpaired one lacks (or a definition it must agree with).
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from rapt_audit.api.types import AttackResult, Estimate, PerRecord
from rapt_audit.reporting.paired_rows import privacy_measures, utility_measures
from rapt_audit.scoring.hierarchical import Resampler, rank, read_frontier
from rapt_audit.benchmark.matched import at_utility, matched
from rapt_audit.reporting.collect import Loaded
from rapt_audit.reporting.pareto import Point
from rapt_audit.reporting.summary import group_results
from tests.result_factory import fake_result

N = 1000  # victim records per seed


def _parts(hits: np.ndarray) -> Estimate:
    parts = PerRecord(tuple(hits.astype(float).tolist()), (1.0,) * hits.size)
    return Estimate(parts.value, max(0.0, parts.value - 0.05), min(1.0, parts.value + 0.05), hits.size,
                    "bootstrap-percentile", per_record=parts)


def _result(defense: str, eta: float | None, seed: int, correct: np.ndarray, private: np.ndarray,
            keep_parts: bool = True, worst: bool = False) -> Loaded:
    """A result whose accuracy and whitebox privacy are the means of ``correct`` and ``private`` (0/1 per record);
    with ``worst``, whitebox's content privacy is the same and the worst case is taken over it."""
    base = fake_result(defense=defense, eta=eta, seed=seed, privacy={"whitebox": 0.5})
    utility, privacy = _parts(correct), _parts(private)
    if not keep_parts:
        utility, privacy = replace(utility, per_record=None), replace(privacy, per_record=None)
    attacks = {"whitebox": AttackResult(privacy, {"token_accuracy": privacy.complement()}, {})}
    if worst:
        attacks = {"whitebox": AttackResult(privacy, {"content_privacy": privacy}, {}),
                   "worst_case": AttackResult(replace(privacy, per_record=None), {"worst_case_privacy": privacy},
                                              {"over": ["whitebox"], "strongest_attack": "whitebox"})}
    result = replace(base, utility={"accuracy": utility}, attacks=attacks)
    return Loaded(Path(f"/{defense}-{eta}-{seed}/result.json"), result)


def _bits(rng: np.random.Generator, rate: float) -> np.ndarray:
    return (rng.random(N) < rate).astype(float)


def _group(shift: float, *, keep_parts: bool = True, seeds: int = 3, worst: bool = False):
    """identity, and two defenses a and b with two private settings and a no-privacy one each; b's privacy is a's
    with ``shift`` of the records flipped from private to leaked (the same records at every setting and seed)."""
    rng = np.random.default_rng(7)
    runs = []
    for seed in range(seeds):
        ceiling = _bits(rng, 0.85)
        runs.append(_result("identity", None, seed, ceiling, _bits(rng, 0.05), keep_parts, worst))
        for eta, (acc, priv) in {25.0: (0.70, 0.60), 100.0: (0.82, 0.30), math.inf: (0.85, 0.02)}.items():
            correct = np.where(rng.random(N) < 0.9, ceiling, _bits(rng, acc))  # mostly the ceiling's own records
            correct[: int(N * (0.85 - acc))] = 0.0
            private = _bits(rng, priv)
            leaked = private.copy()
            leaked[np.flatnonzero(private)[: int(shift * N)]] = 0.0
            runs.append(_result("a", eta, seed, correct, private, keep_parts, worst))
            runs.append(_result("b", eta, seed, correct, leaked, keep_parts, worst))
    (group,) = group_results(runs)
    return group


def test_the_vectorised_frontier_reads_as_the_scalar_definition_on_random_settings():
    rng = np.random.default_rng(0)
    for _ in range(400):
        k = int(rng.integers(1, 6))
        utility = np.round(rng.random(k), 1)  # coarse values, so ties and exact hits occur
        privacy = np.round(rng.random(k), 1)
        target = float(np.round(rng.random(), 1))
        value, kind, between = at_utility([Point(u, p, str(i)) for i, (u, p) in enumerate(zip(utility, privacy))],
                                          target)
        got, code, above, below = read_frontier(utility[None], privacy[None], np.array([target]))
        if value is None:
            assert math.isnan(got[0]) and code[0] == 0
            continue
        assert got[0] == pytest.approx(value)
        assert {"interpolated": 1, "measured": 2, "lower bound": 3}[kind] == code[0]
        read = tuple(str(i) for i in (below[0], above[0]) if i >= 0)
        assert sorted(read) == sorted(between) or utility[list(map(int, read))].tolist() == [
            utility[int(b)] for b in between]


def test_identical_defenses_are_identical_in_every_resample_and_never_separated():
    group = _group(0.0)
    table = matched(group, resamples=300)
    assert table.paired["whitebox"]
    a, b = (next(r for r in table.readings["whitebox"][0.9] if r.defense == d) for d in "ab")
    assert a.value == b.value and a.kind == b.kind
    ranking = table.rankings["whitebox"][0.9]
    assert ranking.p_best["a"] == pytest.approx(0.5) and ranking.p_best["b"] == pytest.approx(0.5)
    assert "no significant difference" in table.verdicts["whitebox"][0.9]


def test_a_small_shift_on_the_same_records_is_separated_paired_and_not_unpaired():
    paired = matched(_group(0.02), resamples=400)
    unpaired = matched(_group(0.02, keep_parts=False), resamples=400)
    assert paired.paired["whitebox"] and not unpaired.paired["whitebox"]
    assert paired.verdicts["whitebox"][0.9].startswith("a (P(best) 1.00)")
    assert paired.rankings["whitebox"][0.9].ranks["a"] == (1, 1)
    assert unpaired.verdicts["whitebox"][0.9].startswith("no significant difference")
    assert unpaired.verdicts["whitebox"][0.9].endswith("(unpaired)")


def test_the_same_records_are_drawn_for_every_defense_at_a_seed_and_seeds_are_drawn_jointly():
    group = _group(0.0)
    rows = {(r.defense, r.setting): r for r in group.rows}
    resampler = Resampler([0, 1, 2], 50, np.random.default_rng(1))
    a = resampler.values(privacy_measures(rows[("a", "η=25")], "whitebox", "empirical_privacy"))
    b = resampler.values(privacy_measures(rows[("b", "η=25")], "whitebox", "empirical_privacy"))
    assert np.array_equal(a, b) and np.unique(a).size > 10  # resampled, and identically for both
    u = resampler.values(utility_measures(rows[("identity", "no privacy")], "accuracy"))
    assert u.shape == (50, 3) and np.all((u > 0.7) & (u < 0.97))


def test_a_joint_non_reach_is_left_out_not_counted_as_a_tie():
    lead = np.array([0.5] * 60 + [np.nan] * 40)
    never = np.full(100, np.nan)
    ranking = rank({"a": lead, "b": never}, "a")
    assert ranking.established == {"b": True} and ranking.compared == 60 and ranking.p_best["a"] == 1.0


def test_a_target_only_the_no_privacy_setting_reaches_is_not_bracketed():
    group = _group(0.0)
    table = matched(group, fractions=(0.98,), resamples=100)
    reading = next(r for r in table.readings["whitebox"][0.98] if r.defense == "a")
    assert reading.value is None and reading.kind == "not bracketed"


def test_results_without_per_record_outcomes_fall_back_to_the_unpaired_reading_and_say_so():
    table = matched(_group(0.0, keep_parts=False), resamples=100)
    assert table.paired == {"whitebox": False} and table.rankings == {}
    assert all(v.endswith("(unpaired)") for v in table.verdicts["whitebox"].values())


def test_the_worst_case_is_the_minimum_of_its_attacks_content_privacy_inside_each_resample():
    rng = np.random.default_rng(3)
    first, second = _parts(_bits(rng, 0.5)), _parts(_bits(rng, 0.5))  # close: either is the lower in some resamples
    attacks = {"whitebox": AttackResult(first, {"content_privacy": first}, {}),
               "mlp_inversion": AttackResult(second, {"content_privacy": second}, {}),
               "worst_case": AttackResult(second, {"worst_case_privacy": second},
                                          {"over": ["mlp_inversion", "whitebox"]})}
    result = replace(fake_result(defense="t2t", eta=50.0), attacks=attacks)
    # Written and read back: the content privacy keeps its per-record parts in the file.
    stored = type(result).from_dict(result.to_dict())
    assert stored.attacks["whitebox"].metrics["content_privacy"].per_record == first.per_record
    (row,) = group_results([Loaded(Path("/t2t/result.json"), stored)]).pop().rows
    resampler = Resampler([0], 200, np.random.default_rng(5))
    worst = resampler.values(privacy_measures(row, "worst_case", "worst_case_privacy"))
    each = [resampler.values(privacy_measures(row, name, "empirical_privacy"))
            for name in ("whitebox", "mlp_inversion")]
    assert np.array_equal(worst, np.minimum(*each)) and (each[0] < each[1]).any() and (each[0] > each[1]).any()


def test_claims_pair_rows_of_several_seeds_so_identical_outcomes_differ_by_exactly_zero():
    from rapt_audit.reporting.claims import difference, privacy_of, utility_of

    rows = {(r.defense, r.setting): r for r in _group(0.0).rows}
    same = difference(rows[("a", "η=25")], rows[("b", "η=25")], privacy_of("whitebox"), "a − b")
    assert same.method == "paired" and same.value == same.low == same.high == 0.0
    shifted = {(r.defense, r.setting): r for r in _group(0.02).rows}
    lead = difference(shifted[("a", "η=25")], shifted[("b", "η=25")], privacy_of("whitebox"), "a − b")
    assert lead.method == "paired" and lead.low > 0  # 2 % of the records, the same ones at every seed
    loose = {(r.defense, r.setting): r for r in _group(0.02, keep_parts=False).rows}
    unpaired = difference(loose[("a", "η=25")], loose[("b", "η=25")], privacy_of("whitebox"), "a − b")
    assert unpaired.method == "unpaired" and unpaired.low < 0 < unpaired.high
    gain = difference(rows[("a", "η=100")], rows[("a", "η=25")], utility_of, "η=100 − η=25")
    assert gain.method == "paired" and gain.low > 0


def _with_local(rate: float, worst: bool = False):
    """:func:`_group`'s rows and two local-only baselines whose accuracy is the ceiling's records at ``rate``."""
    rng = np.random.default_rng(11)
    group = _group(0.02, worst=worst)
    runs = [run for row in group.rows for run in row.runs]
    for row in [r for r in group.rows if r.defense == "identity"]:
        for run in row.runs:
            for client, drop in (("table", rate), ("bow", rate + 0.05)):
                correct = np.array(run.result.utility["accuracy"].per_record.num)
                correct[rng.random(N) < drop] = 0.0
                local = _result("local", None, seed_of_run(run), correct, np.zeros(N))
                local.result.defense["params"] = {"client": client}
                config = {**local.result.config, "defense_args": {"client": client}}
                runs.append(replace(local, path=Path(f"/local-{client}-{seed_of_run(run)}/result.json"),
                                    result=replace(local.result, attacks={}, config=config,
                                                   cell_id=f"local-{client}-{seed_of_run(run)}")))
    (grouped,) = group_results(runs)
    return grouped


def seed_of_run(run: Loaded) -> int:
    return int(run.result.config["seed"])


def test_a_share_whose_margin_is_not_established_shows_only_its_bounded_upper_end():
    from rapt_audit.benchmark.paired import Margin
    from rapt_audit.benchmark.render import _share_cell

    def margin(low: float, high: float, share: tuple[float, float, float]) -> Margin:
        return Margin(row=None, margin=Estimate(value=(low + high) / 2, ci_low=low, ci_high=high),
                      share=Estimate(value=share[0], ci_low=share[1], ci_high=share[2]))

    assert _share_cell(margin(-0.047, 0.003, (-0.688, -2.769, 0.054))) == "at most 0.054 (not established)"
    assert _share_cell(margin(-0.040, -0.001, (-0.5, -1.9, -0.02))) == "none (below the baseline)"
    assert _share_cell(margin(-0.030, 0.001, (-0.6, -2.0, -0.01))) == "at most 0.000 (not established)"
    assert _share_cell(margin(0.012, 0.049, (1.0, 1.0, 1.0))).startswith("1.000")


def test_every_setting_is_compared_paired_with_sending_nothing_and_the_baselines_are_never_candidates():
    from rapt_audit.benchmark.render import local_rows

    table = matched(_with_local(0.10), resamples=300)
    margins = {(m.row.defense, m.row.setting): m for m in table.against_local}
    assert not any(d == "local" for d, _ in margins)  # the baselines are the reference, not compared
    assert margins[("a", "η=100")].verdict == "beats sending nothing"  # 0.80 against the best client's ~0.75
    assert margins[("a", "η=25")].verdict == "below sending nothing"  # 0.70
    assert margins[("identity", "no privacy")].share.value == pytest.approx(1.0)  # the ceiling keeps all its gain
    assert all(r.defense != "local" for r in table.readings["whitebox"][0.9])
    rows = local_rows(table)
    assert [r[0] for r in rows[:2]] == ["local", "local"] and rows[0][3] == "local-only baseline"
    share = {(r[0], r[1]): r[4] for r in rows}  # a setting below sending nothing keeps none of the gain
    assert share[("a", "η=25")] == "none (below the baseline)" and share[("a", "η=100")][0].isdigit()
    # Paired over seeds and records, and never narrower than the Student-t interval over the per-seed margins.
    ceiling = margins[("identity", "no privacy")].margin
    assert ceiling.method.startswith("bootstrap-paired-hierarchical")


def test_the_detectable_difference_is_the_spread_of_paired_differences_at_80_percent_power():
    from rapt_audit.scoring.hierarchical import POWER_80, minimum_detectable

    rng = np.random.default_rng(2)
    common = rng.normal(0.5, 0.05, 4000)  # what every candidate shares on a resample: cancels in a difference
    stack = np.vstack([common + rng.normal(0, 0.01, 4000) for _ in range(3)])
    assert minimum_detectable(stack) == pytest.approx(POWER_80 * 0.01 * math.sqrt(2), rel=0.05)
    stack[2, :3000] = np.nan  # reached in a quarter of the resamples: its pairs do not count
    assert minimum_detectable(stack) == pytest.approx(POWER_80 * 0.01 * math.sqrt(2), rel=0.05)
    assert minimum_detectable(stack[2:]) is None
    table = matched(_group(0.02), resamples=200)
    assert table.rankings["whitebox"][0.9].detectable < 0.05


def test_a_sanity_baseline_is_one_check_line_not_a_column_of_the_matched_tables():
    from rapt_audit.benchmark.render import _attacks, sanity_lines

    runs = [run for row in _group(0.0).rows for run in row.runs]
    guessed = [replace(run, result=replace(run.result, attacks={
        **run.result.attacks, "random_guess": AttackResult(Estimate(0.99, 0.98, 1.0, N, "bootstrap-percentile"),
                                                           {}, {})})) for run in runs]
    (group,) = group_results(guessed)
    table = matched(group, resamples=50)
    assert "random_guess" in table.readings and _attacks(table) == ["whitebox"]
    assert sanity_lines(table) == ["Check: random_guess (a sanity baseline that ignores the release) reads 0.990 – "
                                   "0.990 over 7 settings; it should not depend on the defense."]


def test_holm_stops_at_the_first_comparison_it_cannot_reject_and_ranks_leave_out_joint_non_reach():
    lead = np.ones(1000)
    b, c = np.zeros(1000), np.zeros(1000)
    b[:19], c[:14] = 2.0, 2.0  # one-sided p: 20/1001 = 0.020 and 15/1001 = 0.015, each under 0.025 alone
    ranking = rank({"a": lead, "b": b, "c": c}, "a")
    # Holm: the smallest p (c's 0.015) must be under 0.025 / 2 — it is not, so neither lead is established.
    assert ranking.established == {"b": False, "c": False}
    c[:14] = 0.0
    # 0.001 ≤ 0.0125, then 0.020 ≤ 0.025: both established.
    assert rank({"a": lead, "b": b, "c": c}, "a").established == {"b": True, "c": True}
    nobody = np.full(1000, np.nan)
    draws = {"a": np.where(np.arange(1000) < 100, np.nan, 0.9), "b": np.where(np.arange(1000) < 100, np.nan, 0.5),
             "never": nobody}
    ranking = rank(draws, "a")
    assert ranking.ranks == {"a": (1, 1), "b": (2, 2), "never": (3, 3)} and ranking.compared == 900


def test_a_seed_a_defense_never_ran_is_left_out_not_read_as_missing_the_target():
    group = _with_local(0.10, worst=True)
    for row in group.rows:  # b's and one local client's runs at seed 2 never happened
        if row.defense == "b" or row.setting == "client=bow":
            row.runs[:] = [run for run in row.runs if run.result.config["seed"] != 2]
    table = matched(group, fractions=(0.9,), resamples=200)
    b = next(r for r in table.readings["whitebox"][0.9] if r.defense == "b")
    assert b.value is not None and b.kind != "not reached" and b.reached > 0.9
    assert {(m.row.defense, m.row.setting) for m in table.against_local} >= {("b", "η=100"), ("a", "η=100")}


def test_a_service_that_gains_nothing_over_sending_nothing_keeps_no_share_and_does_not_crash():
    table = matched(_with_local(0.0, worst=True), fractions=(0.9,), resamples=200)
    assert table.against_local and all(m.share is None for m in table.against_local)


def test_measures_over_other_records_at_a_seed_are_not_paired():
    runs = [run for row in _group(0.0).rows for run in row.runs]
    shorter = []
    for run in runs:
        if run.result.defense["name"] == "b":
            attack = run.result.attacks["whitebox"]
            parts = attack.empirical_privacy.per_record
            cut = PerRecord(parts.num[:-10], parts.den[:-10])
            est = Estimate(cut.value, 0.0, 1.0, len(cut), "bootstrap-percentile", per_record=cut)
            run = replace(run, result=replace(run.result, attacks={"whitebox": AttackResult(est, {}, {})}))
        shorter.append(run)
    (group,) = group_results(shorter)
    assert matched(group, fractions=(0.9,), resamples=50).paired == {"whitebox": False}


def test_the_unpaired_fallback_never_reads_a_chord_to_the_no_privacy_setting():
    table = matched(_group(0.0, keep_parts=False), fractions=(0.98,), resamples=100)
    reading = next(r for r in table.readings["whitebox"][0.98] if r.defense == "a")
    assert reading.value is None and reading.kind == "not bracketed"

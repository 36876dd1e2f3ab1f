"""What text defenses release verbatim: unchanged units by category, sensitive strings that go through as they were."""

from __future__ import annotations

import rapt_audit
from rapt_audit.mechanisms.calibration import ReplacementCount
from rapt_audit.mechanisms.verbatim import describe_verbatim, verbatim_summary

TEXT = "Call Ann on +44 20 7946 0958 or mail ann.lee@example.org about room 42, see www.example.org/x"


def test_summary_counts_units_and_sensitive_strings():
    count = ReplacementCount(perturbed=10, replaced=4, passed=5)
    count.count_category("noun", perturbed=10, replaced=4)
    count.count_category("numeral", passed=5)
    released = "call bob on +44 20 7946 0958 or mail someone about room 42 see elsewhere"
    summary = verbatim_summary([TEXT], [released], count)
    assert summary["units"] == 15 and summary["units_unchanged"] == 11
    assert summary["unchanged_share_by_category"] == {"noun": 0.6, "numeral": 1.0}
    sensitive = summary["sensitive_strings"]
    assert (sensitive["phone"]["found"], sensitive["phone"]["verbatim"]) == (1, 1)
    assert (sensitive["email"]["found"], sensitive["email"]["verbatim"]) == (1, 0)
    assert (sensitive["url"]["found"], sensitive["url"]["verbatim"]) == (1, 0)
    assert (sensitive["number"]["found"], sensitive["number"]["verbatim"]) == (1, 1)  # 42; the phone's digits are taken
    assert "1 of 1 phone" in describe_verbatim(summary) and "0 of 1 email" in describe_verbatim(summary)


def test_privatize_reports_what_went_through():
    kept, record = rapt_audit.privatize([TEXT], "pct2t", eta="inf")
    assert kept == [TEXT]
    assert all(c["verbatim"] == c["found"] == 1 for c in record["sensitive_strings_verbatim"].values())
    _, noisy = rapt_audit.privatize([TEXT] * 5, "t2t", eta=1, seed=1)
    counts = noisy["sensitive_strings_verbatim"]
    assert counts["number"]["found"] == 5 and counts["number"]["verbatim"] < 5  # eta = 1 replaces almost every token


def test_text_release_records_the_verbatim_summary(ctx, synthetic_splits):
    from rapt_audit.api.params import make_plugin
    from rapt_audit.api.plugins import DEFENSES, load

    load()
    defense = make_plugin(DEFENSES, "pct2t", {"eta": "inf"}).fit(synthetic_splits.victim_train, ctx=ctx)
    verbatim = defense.release(synthetic_splits.victim_test, ctx=ctx).meta["verbatim"]
    assert verbatim["units_unchanged_share"] == 1.0 and verbatim["units"] > 100
    assert set(verbatim["unchanged_share_by_category"]) >= {"noun", "verb", "determiner"}


def test_report_shows_the_unchanged_share():
    from pathlib import Path

    from rapt_audit.reporting.collect import Collection, Loaded
    from rapt_audit.reporting.report import build_report
    from tests.result_factory import fake_result

    plain = fake_result(eta=25)
    assert "released unchanged" not in build_report(Collection(results=[Loaded(Path("a"), plain)])).html
    text = fake_result(eta=75)
    text.defense["release_meta"]["verbatim"] = {"units_unchanged_share": 0.8125}
    page = build_report(Collection(results=[Loaded(Path("a"), plain), Loaded(Path("b"), text)])).html
    assert "released unchanged" in page and "81.2 %" in page and "—" in page

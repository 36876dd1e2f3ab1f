"""``rapt-audit audit`` on the word-level sanitizers: correct releases pass, planted faults are caught.

Each plant wraps the function the defense itself calls (``sample_by_distance`` in the SanText module), so
only the fault differs from the release as it ships; the audit then runs the defense's own ``release_words``.
The audit's confidence is 1 − 0.05 for the whole audit (Bonferroni over its pairs, Clopper–Pearson bounds).
"""

from __future__ import annotations

import pytest

from rapt_audit.audit.black_box import audit_defense


def _four_times_epsilon(real):
    """the law drawn at 4ε: exp(−2ε·d) instead of exp(−ε·d/2)"""
    return lambda table, words, outputs, log_weight, uniforms: real(table, words, outputs,
                                                                      lambda d: 4.0 * log_weight(d), uniforms)


def _over_every_word(real):
    """SanText+ read as issue #3 proposes: a sensitive word drawn over all words, not over the sensitive ones"""
    import numpy as np

    return lambda table, words, outputs, log_weight, uniforms: real(table, words, np.arange(len(table.words)),
                                                                      log_weight, uniforms)


def _plant(monkeypatch, fault) -> None:
    import rapt_audit.defenses.santext as santext

    if fault is not None:
        monkeypatch.setattr(santext, "sample_by_distance", fault(santext.sample_by_distance))


@pytest.mark.parametrize("fault", [None, _four_times_epsilon], ids=["correct", "four-times-epsilon"])
def test_santext_audit_passes_and_catches_a_scale_fault(fault, monkeypatch, warm_cache):
    # ε = 4: the nearest pair good / excellent claims 4.14, under the ceiling (7.59) of 10,000 releases. Measured:
    # correct, a lower bound of 0.0; at 4ε, 5.69 (at 4ε with ε = 2 only 0.93: the law is still near-uniform).
    _plant(monkeypatch, fault)
    report = audit_defense("santext", {"epsilon": 4.0}, samples=10_000, pairs=2, search=0)
    verdicts = [p.verdict for p in report.pairs]
    if fault is None:
        assert report.verdict == "ok" and set(verdicts) == {"ok"}, verdicts
    else:
        assert report.verdict == "VIOLATION" and verdicts[0] == "VIOLATION", [p.to_json() for p in report.pairs]


def test_santext_plus_read_as_issue_3_breaks_the_sensitive_support(monkeypatch, warm_cache):
    report = audit_defense("santext", {"epsilon": 2.0, "plus": True}, samples=2_000, pairs=1, search=0)
    assert report.verdict == "ok" and report.pairs[-1].label.startswith("support")
    _plant(monkeypatch, _over_every_word)
    report = audit_defense("santext", {"epsilon": 2.0, "plus": True}, samples=2_000, pairs=1, search=0)
    assert report.pairs[-1].label.startswith("support") and report.pairs[-1].verdict == "VIOLATION"


def test_custext_audit_pairs_words_of_one_set_and_checks_the_set_as_support(warm_cache):
    report = audit_defense("custext", {"epsilon": 3.0}, samples=2_000, pairs=2, search=0)
    assert report.verdict == "ok"
    nearest, null, support = report.pairs
    assert nearest.claim == 3.0 and null.claim == 0.0 and support.label.startswith("support")

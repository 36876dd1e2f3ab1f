"""rapt-audit's conformance battery on word_drop as installed (pip install -e . first)."""

from rapt_audit.plugin import check_plugin


def test_word_drop_keeps_every_rule():
    report = check_plugin("defense", "word_drop")
    assert report.passed and not report.skipped, report.format()

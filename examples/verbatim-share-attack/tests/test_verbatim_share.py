"""rapt-audit's conformance battery on verbatim_share as installed (pip install -e . first)."""

from rapt_audit.plugin import check_plugin


def test_verbatim_share_keeps_every_rule():
    report = check_plugin("attack", "verbatim_share")
    assert report.passed and not report.skipped, report.format()

"""Reading stored results back: HTML report, figures, Pareto frontier, leaderboard, regression gate.

Owns: :mod:`~rapt_audit.reporting.collect` (finding and loading results),
:mod:`~rapt_audit.reporting.summary` (comparable groups, one row per setting),
:mod:`~rapt_audit.reporting.pareto`, :mod:`~rapt_audit.reporting.figures`,
:mod:`~rapt_audit.reporting.report` (+ :mod:`~rapt_audit.reporting.style`, and
:mod:`~rapt_audit.reporting.threats`: attacks grouped by threat model),
:mod:`~rapt_audit.reporting.leaderboard` (+ :mod:`~rapt_audit.reporting.markdown`: the one escaping of any
string from a file or the command line into Markdown), :mod:`~rapt_audit.reporting.check` and
:mod:`~rapt_audit.reporting.claims` (+ its report section :mod:`~rapt_audit.reporting.claims_html`) and
:mod:`~rapt_audit.reporting.slim` (result files without per-record parts). Nothing here runs
an audit: everything is rendered from ``result.json`` files. Nothing here parses arguments either: the
commands that call these modules are in :mod:`rapt_audit.cli` (``tests/test_architecture.py`` checks it).

May import: :mod:`rapt_audit.api`, :mod:`rapt_audit.scoring`, :mod:`rapt_audit.mechanisms` (published
reference tables) and :mod:`rapt_audit.pipeline` (the result file format).
"""

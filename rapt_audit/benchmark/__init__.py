"""Benchmarks: a declared file of defenses, grids, seeds, datasets and a utility protocol, run and read as one.

Owns: :mod:`~rapt_audit.benchmark.spec` (the ``benchmarks/NAME.toml`` format, the shipped files) with
:mod:`~rapt_audit.benchmark.locate` (the line of a key, for errors) and
:mod:`~rapt_audit.benchmark.validate` (every check before any work), :mod:`~rapt_audit.benchmark.plan`
(the cells and their estimated cost, with :mod:`~rapt_audit.benchmark.costs`: the figures of ``costs.toml`` by
profile, service model and method; the dry run's listing: :mod:`~rapt_audit.benchmark.listing`),
:mod:`~rapt_audit.benchmark.run` (the cells through the sweep machinery, and ``benchmark.json``),
:mod:`~rapt_audit.benchmark.join` (the cells of one setting and seed joined into one result),
:mod:`~rapt_audit.benchmark.matched` (privacy at matched utility),
:mod:`~rapt_audit.benchmark.render` (the report and leaderboard, through the reporting layer's own),
:mod:`~rapt_audit.benchmark.claims` (the seed papers' claims on the joined rows: ``claims.md`` and
``rapt-audit claims FOLDER`` alike), :mod:`~rapt_audit.benchmark.holdings` (the cache by benchmark, setting and
kind: ``rapt-audit cache``, what a run stored and may drop, the disk a dry run's cells need), and
:mod:`~rapt_audit.benchmark.admit` with :mod:`~rapt_audit.benchmark.verify` (a contributor's folder checked
against the published one: cells measured otherwise refused, a sample re-run and compared within noise).

May import: :mod:`rapt_audit.api`, :mod:`rapt_audit.scoring`, :mod:`rapt_audit.data` (datasets are
checked before any work), :mod:`rapt_audit.pipeline` (configurations, sweeps, result files) and
:mod:`rapt_audit.reporting` (the report, the leaderboard, the seed combination). Only ``cli`` imports it.
"""

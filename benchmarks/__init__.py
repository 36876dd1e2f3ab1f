"""The benchmark files shipped with rapt-audit (``rapt-audit benchmark run NAME``), installed as ``rapt_audit.benchmarks``.

Each ``NAME.toml`` declares one benchmark (format: :mod:`rapt_audit.benchmark.spec`). This folder holds
data only; the file exists so that the folder installs as package data (pyproject.toml) and is found
the same way from a checkout and from an installed wheel.
"""

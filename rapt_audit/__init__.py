"""rapt-audit: audits local privacy defenses for text sent to LLM services.

The public API is small and cheap to import (no torch until a plugin needs it)::

    from rapt_audit import RunConfig, run
    result = run(RunConfig(defense="identity", attacks="all", dataset="synthetic", profile="smoke"))

    from rapt_audit import privatize                # the user's side: run a defense on one's own text
    texts, record = privatize(["my rent is due on friday"], "pct2t", eta=75, seed=1)

    from rapt_audit import audit_defense            # lower bounds on a mechanism's privacy loss vs its claim
    report = audit_defense("t2t", {"eta": 5}, samples=2000, pairs=2)

    from rapt_audit import load, summarize          # stored results as pandas DataFrames
    frame = load("runs/t2t-eta")                    # one row per result × measure
    table = summarize("runs/t2t-eta")               # the report's rows: seeds combined, 95 % intervals

The package is layered (see ARCHITECTURE.md); this module only re-exports the public names.
"""

from __future__ import annotations

from rapt_audit.api.types import Attack, AttackerData, AttackResult, Defense, Estimate, Record, Release, Skip, Span
from rapt_audit.api.version import __version__
from rapt_audit.audit.black_box import audit_defense
from rapt_audit.pipeline.config import RunConfig, build_config
from rapt_audit.pipeline.runner import run
from rapt_audit.reporting.frames import load, summarize
from rapt_audit.user_side.privatizer import Privatizer, privatize

__all__ = ["Attack", "AttackResult", "AttackerData", "Defense", "Estimate", "Privatizer", "Record", "Release",
           "RunConfig", "Skip", "Span", "__version__", "audit_defense", "build_config", "load", "privatize", "run",
           "summarize"]

"""rapt-audit: audits local privacy defenses for text sent to LLM services.

The public API is small and cheap to import (no torch until a plugin needs it)::

    from rapt_audit import RunConfig, run
    result = run(RunConfig(defense="identity", attacks="all", dataset="synthetic", profile="smoke"))
"""

from __future__ import annotations

__version__ = "0.1.0"

from rapt_audit.config import RunConfig, build_config  # noqa: E402
from rapt_audit.types import (Attack, AttackerData, AttackResult, Defense, Estimate, Record,  # noqa: E402
                              Release, Skip, Span)


def run(config: RunConfig, **kwargs):  # noqa: ANN001, ANN201 - thin lazy wrapper
    """Run one audit (see :func:`rapt_audit.runner.run`)."""
    from rapt_audit.runner import run as _run

    return _run(config, **kwargs)


__all__ = ["Attack", "AttackResult", "AttackerData", "Defense", "Estimate", "Record", "Release", "RunConfig",
           "Skip", "Span", "__version__", "build_config", "run"]

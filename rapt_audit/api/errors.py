"""Exceptions with messages that name the problem and the fix.

Every error a user can cause derives from :class:`RaptAuditError`; the CLI turns these into a
one-paragraph message and exit code 2, and never leaves a half-written result behind.
"""

from __future__ import annotations


class RaptAuditError(Exception):
    """Base class of all user-facing errors (the CLI exits with code 2 on these)."""


class UsageError(RaptAuditError, ValueError):
    """A command line, configuration key or plugin parameter is invalid."""


class UnknownNameError(UsageError, KeyError):
    """A plugin, dataset or key name is not known; the message lists the closest valid names."""

    def __str__(self) -> str:  # KeyError would otherwise wrap the message in quotes
        return str(self.args[0]) if self.args else ""


class PrivacyParameterError(UsageError):
    """A privacy parameter (eta, epsilon, ...) is outside its valid range."""


class DataError(RaptAuditError):
    """A dataset is missing, incomplete or malformed; the message says which file and where."""


class ModelError(RaptAuditError):
    """A model cannot be found or loaded; the message says how to provide it."""


class ResultError(RaptAuditError):
    """A result file or output directory is unusable (corrupt, other schema, different run)."""


class PluginError(RaptAuditError):
    """A defense or attack plugin raised or broke its contract; the message names the plugin and how.

    A failing attack is recorded in the result (:class:`~rapt_audit.api.types.AttackFailure`) and the
    run goes on; a failing defense leaves nothing to attack, so the run stops with this error.
    """

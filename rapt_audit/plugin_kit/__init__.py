"""Tools for plugin authors, shipped with the package: the conformance battery and the skeleton writer.

Owns: :mod:`~rapt_audit.plugin_kit.conformance` (the rules every defense and attack keeps, run on an
installed plugin: ``rapt-audit plugin check NAME``, and by the repository's own conformance tests, so
there is one implementation), :mod:`~rapt_audit.plugin_kit.skeleton` (``rapt-audit plugin new``:
a plugin package with its entry point, written from templates) and :mod:`~rapt_audit.plugin_kit.toolkit`
(PCT2T's per-category lexicon, its index and word embedding, in the shapes a third-party defense uses).

May import: :mod:`rapt_audit.api`, :mod:`rapt_audit.scoring`, :mod:`rapt_audit.encoder`,
:mod:`rapt_audit.data`, :mod:`rapt_audit.mechanisms` and :mod:`rapt_audit.pipeline` (the battery
builds a run context and applies the runner's own contract checks). It reaches the plugins only
through the registries, never by importing ``rapt_audit.defenses`` or ``rapt_audit.attacks``; the
public facade :mod:`rapt_audit.plugin` and :mod:`rapt_audit.cli` import it, nothing below them does.
"""

from __future__ import annotations

from rapt_audit.plugin_kit.conformance import ConformanceReport, Verdict, check_plugin

__all__ = ["ConformanceReport", "Verdict", "check_plugin"]

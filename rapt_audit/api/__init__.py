"""The vocabulary every other layer speaks: data types, plugin protocols, errors, registries, parameters.

Owns: :mod:`~rapt_audit.api.types` (Record, Release, Estimate, AttackResult, Skip, AttackFailure and
the Defense / Attack protocols), :mod:`~rapt_audit.api.errors`, :mod:`~rapt_audit.api.registry`
(registries with did-you-mean errors and the selection grammar), :mod:`~rapt_audit.api.plugins` (the
defense and attack registries, entry-point discovery that leaves a broken plugin out with a warning),
:mod:`~rapt_audit.api.params` (typed plugin parameters), :mod:`~rapt_audit.api.files` (the one
atomic file writer) and :mod:`~rapt_audit.api.version`.

May import: the standard library only (``RunContext`` is named in type hints alone). Importing this
package must stay instant: ``rapt-audit --help`` and ``ls`` go through it.
"""

"""The vocabulary every other layer speaks: data types, plugin protocols, errors, registries, parameters.

Owns: :mod:`~rapt_audit.api.types` (Record, Release, Estimate, AttackResult, Skip, AttackFailure and
the Defense / Attack protocols), :mod:`~rapt_audit.api.context` (the ``RunContext`` protocol: what a
plugin may ask of its run; the pipeline's class satisfies it), :mod:`~rapt_audit.api.threat` (an
attack's threat model as data), :mod:`~rapt_audit.api.capabilities` (what a defense can do as data: its
audit protocol, whether it is the no-privacy reference, has its own service or sends nothing),
:mod:`~rapt_audit.api.errors`, :mod:`~rapt_audit.api.registry` (registries with did-you-mean errors and the
selection grammar), :mod:`~rapt_audit.api.plugins` (the defense and attack registries, entry-point discovery
that leaves a broken plugin out with a warning, listing without importing, a defense's capabilities by name),
:mod:`~rapt_audit.api.params` (typed plugin parameters), :mod:`~rapt_audit.api.parsing` (text turned into
values: floats with infinity spelled, seeds, TOML/JSON files), :mod:`~rapt_audit.api.files` (the one atomic
file writer), :mod:`~rapt_audit.api.outputs` (the output rule: what every command that writes checks first) and
:mod:`~rapt_audit.api.version`.

May import: the standard library only. Importing this package must stay instant: ``rapt-audit --help``
and ``ls`` go through it.
"""

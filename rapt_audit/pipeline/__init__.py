"""One audit end to end, and many: configuration, the run context, the runner, sweeps, result files.

Owns: :mod:`~rapt_audit.pipeline.config` (RunConfig and its precedence rules),
:mod:`~rapt_audit.pipeline.context` (RunContext: seeds, device, shared objects),
:mod:`~rapt_audit.pipeline.runner` (``run(config)``, ``compute(config)``; with
:mod:`~rapt_audit.pipeline.gpu_usage`: GPU use sampled per stage), :mod:`~rapt_audit.pipeline.sweep`
(with :mod:`~rapt_audit.pipeline.ray_executor`: cells as Ray tasks),
:mod:`~rapt_audit.pipeline.results` (the result file and its signature; :mod:`~rapt_audit.pipeline.tidy`
its tidy rows), :mod:`~rapt_audit.pipeline.bundle` (``rapt-audit bundle``: what an offline GPU machine
needs, packed; ``bundle_pieces``, ``bundle_wheels``, and ``bundle_target``, which runs there) and
:mod:`~rapt_audit.pipeline.cache` (releases stored on disk by the signature of what they depend on),
and the user's side: :mod:`~rapt_audit.pipeline.user_side` (``Privatizer``, ``privatize``: a defense
run on one's own text) with :mod:`~rapt_audit.pipeline.user_io` (text, JSON Lines and CSV, streamed),
and :mod:`~rapt_audit.pipeline.privacy_audit` (``rapt-audit audit``: a defense's mechanism audited
as a black box on pairs of inputs).

May import: every layer below it (api, scoring, encoder, data, mechanisms); it reaches the plugins only through
the registries. Named ``pipeline`` rather than ``run`` so that :func:`rapt_audit.run` stays a function.
"""

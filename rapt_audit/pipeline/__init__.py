"""One audit end to end, and many: configuration, the run context, the runner, sweeps, result files.

Owns: :mod:`~rapt_audit.pipeline.config` (RunConfig and its precedence rules),
:mod:`~rapt_audit.pipeline.context` (RunContext: seeds, device, shared objects),
:mod:`~rapt_audit.pipeline.runner` (``run(config)``, ``compute(config)``; with
:mod:`~rapt_audit.pipeline.gpu_usage`: GPU use sampled per stage), :mod:`~rapt_audit.pipeline.sweep`
(with :mod:`~rapt_audit.pipeline.local_executor`: cells in worker processes,
:mod:`~rapt_audit.pipeline.ray_executor`: cells as Ray tasks, and what both share,
:mod:`~rapt_audit.pipeline.cell_driver`; :mod:`~rapt_audit.pipeline.cell_limit`: the most cells a grid may make,
counted before any is built; :mod:`~rapt_audit.pipeline.estimates`: the one estimator of what cells will take,
which :mod:`~rapt_audit.pipeline.time_budget` starts cells by), :mod:`~rapt_audit.pipeline.results` (the result
file and its signature; :mod:`~rapt_audit.pipeline.tidy` its tidy rows), and :mod:`~rapt_audit.pipeline.cache`
(releases stored on disk by the signature of what they depend on; :mod:`~rapt_audit.pipeline.text_store`
the privatized texts of text defenses; :mod:`~rapt_audit.pipeline.cache_ledger`: what each cell stored in the
cache, and the one remover of its entries). The commands built on it live above it: the offline bundle in
:mod:`rapt_audit.bundle`, the user's side in :mod:`rapt_audit.user_side`, the black-box audit in
:mod:`rapt_audit.audit`.

May import: every layer below it (api, scoring, encoder, data, mechanisms); it reaches the plugins only through
the registries. Named ``pipeline`` rather than ``run`` so that :func:`rapt_audit.run` stays a function.
"""

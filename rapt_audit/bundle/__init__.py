"""``rapt-audit bundle``: what an offline GPU machine needs to run one rapt-audit command, packed.

Owns: :mod:`~rapt_audit.bundle.packing` (``pack``: the bundle folder, its pieces, manifest and size limit),
:mod:`~rapt_audit.bundle.pieces` (the fp16 model, the data files the run reads, rapt-audit's own source,
and the one way a piece is written), :mod:`~rapt_audit.bundle.wheels` (the distributions the GPU image
lacks, their wheels, trimmed), :mod:`~rapt_audit.bundle.analyses` (``--no-spacy``: spaCy's analyses of
every text the run reads, shipped instead of spaCy) and :mod:`~rapt_audit.bundle.target` (the GPU
machine's side, copied into every bundle as ``unbundle.py``: standard library only, it imports no
``rapt_audit`` module).

May import: :mod:`rapt_audit.api`, :mod:`rapt_audit.scoring`, :mod:`rapt_audit.encoder`,
:mod:`rapt_audit.data`, :mod:`rapt_audit.mechanisms` and :mod:`rapt_audit.pipeline` (the run's
configuration, context and default dataset); it reaches the plugins only through the registries. It
imports neither :mod:`rapt_audit.user_side` nor :mod:`rapt_audit.audit`; only ``cli`` imports it.
"""

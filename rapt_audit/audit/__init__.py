"""``rapt-audit audit``: a defense's mechanism audited as a black box, pair of inputs by pair of inputs.

Owns: :mod:`~rapt_audit.audit.black_box` (``audit_defense``: the pairs that stress each audited
defense's mechanism, its releases drawn exactly as the defense draws them, and empirical lower bounds
on the privacy loss compared with the defense's claim) and :mod:`~rapt_audit.audit.protocols` (how each kind of
mechanism is sampled, chosen by the defense's declared capabilities or the methods it has, never by its name).
The statistics of one pair are :mod:`rapt_audit.mechanisms.audit`'s.

May import: :mod:`rapt_audit.api`, :mod:`rapt_audit.scoring`, :mod:`rapt_audit.encoder`,
:mod:`rapt_audit.data`, :mod:`rapt_audit.mechanisms` and :mod:`rapt_audit.pipeline` (the run context);
it reaches the plugins only through the registries. It imports neither :mod:`rapt_audit.bundle` nor
:mod:`rapt_audit.user_side`; ``cli`` and the package's public re-exports (``rapt_audit/__init__.py``) import it.
"""

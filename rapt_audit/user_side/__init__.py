"""The user's side (``rapt-audit privatize``): a defense run on one's own text, on one's own device.

Owns: :mod:`~rapt_audit.user_side.privatizer` (``Privatizer``, ``privatize``: the defense's own
``privatize_records`` or ``release``, batch by batch, with a record of what was done) and
:mod:`~rapt_audit.user_side.formats` (the user's input and output as text lines, JSON Lines or CSV,
streamed one record at a time; :mod:`~rapt_audit.user_side.records`: each JSON object or CSV row
written back as it was read, but for its text). Named ``user_side`` rather than ``privatize`` so that
:func:`rapt_audit.privatize` stays a function.

May import: :mod:`rapt_audit.api`, :mod:`rapt_audit.scoring`, :mod:`rapt_audit.encoder`,
:mod:`rapt_audit.data`, :mod:`rapt_audit.mechanisms` and :mod:`rapt_audit.pipeline` (the run context);
it reaches the plugins only through the registries. It imports neither :mod:`rapt_audit.bundle` nor
:mod:`rapt_audit.audit`; ``cli`` and the package's public re-exports (``rapt_audit/__init__.py``) import it.
"""

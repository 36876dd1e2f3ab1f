"""Built-in attacks; importing this package registers them (``rapt_audit.attacks``).

One module per attack. Helpers shared by several attacks sit beside them with a leading underscore:
``_base`` (disjointness and size checks, adaptive releases), ``_token_views`` (token-level views of a
release for the inversion attacks) and ``_ner_tags``; an attack too large for one file keeps its parts in
one of its own (``_bayes_model``: the channel, n-gram prior and decoder of ``bayes_inversion``); aligning
original and released units is :mod:`rapt_audit.mechanisms.align` (privacy-adaptive pretraining aligns them too). Attacks may import every core layer
below ``pipeline`` (the ``ctx`` they are handed is typed by :class:`rapt_audit.api.context.RunContext`); they read the
vocabulary and embeddings from :mod:`rapt_audit.encoder` and re-run a defense only through its
public ``release``.
"""

from rapt_audit.attacks import (  # noqa: F401
    ae_inversion,
    attribute,
    bayes_inversion,
    bow_inversion,
    mlp_inversion,
    mutual_info,
    ner,
    random_guess,
    whitebox,
)

"""Built-in defenses; importing this package registers them (``rapt_audit.defenses``).

One module per defense. Helpers shared by several defenses sit beside them with a leading
underscore: ``_text`` (the base of every text-to-text defense), ``_dchi_text`` (its dχ subclass: η
and its calibration, the service's pretraining; T2T, PCT2T, RAPT), ``_customization`` (the service's
settings), ``_representation`` (CAPE, DPNR, SnD), ``_adversarial`` (CAPE's adversary, the probes of
the representation defenses), ``_denoiser`` (SnD's client-side denoiser) and ``_word_mechanism`` (the base
and shared pieces of the ε-parameterised word-level sanitizers: SanText, CusText, TEM, Vickrey,
Mahalanobis). Defenses may import
every core layer below ``pipeline`` (the ``ctx`` they are handed is typed by the protocol
:class:`rapt_audit.api.context.RunContext`); they never import an attack.
"""

from rapt_audit.defenses import (cape, custext, dpnr, embedding, identity, local, mahalanobis, pct2t,  # noqa: F401
                                 rapt, santext, snd, t2t, tem, vickrey)

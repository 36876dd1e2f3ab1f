"""Built-in defenses; importing this package registers them (``rapt_audit.defenses``).

One module per defense. Helpers shared by several defenses sit beside them with a leading
underscore: ``_text`` (the text-to-text base class), ``_representation`` (CAPE, DPNR, SnD),
``_adversarial`` (CAPE's adversary, the probes of the representation defenses) and ``_denoiser``
(SnD's client-side denoiser). Defenses may import every core layer except ``reporting``, and from
``pipeline`` only the ``RunContext`` they are handed; they never import an attack.
"""

from rapt_audit.defenses import cape, dpnr, embedding, identity, pct2t, rapt, snd, t2t  # noqa: F401

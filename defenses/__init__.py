"""Built-in defenses; importing this package registers them (``rapt_audit.defenses``)."""

from rapt_audit.defenses import embedding, identity, pct2t, rapt, t2t  # noqa: F401
from rapt_audit.defenses import cape, dpnr, snd  # noqa: F401  (representation defenses, issue #6)

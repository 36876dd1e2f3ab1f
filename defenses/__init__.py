"""Built-in defenses; importing this package registers them (``rapt_audit.defenses``)."""

from rapt_audit.defenses import identity  # noqa: F401

"""Built-in attacks; importing this package registers them (``rapt_audit.attacks``)."""

from rapt_audit.attacks import random_guess  # noqa: F401

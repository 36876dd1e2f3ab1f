"""Built-in attacks; importing this package registers them (``rapt_audit.attacks``)."""

from rapt_audit.attacks import (  # noqa: F401
    ae_inversion,
    attribute,
    mlp_inversion,
    mutual_info,
    ner,
    random_guess,
    whitebox,
)

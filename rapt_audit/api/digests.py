"""Short stable digests for cache signatures: of the code that computes a cached thing, of arrays it was computed
from, and of a whole signature (an entry's file name). Every disk cache of the project keys its entries with them
(trained weights: :mod:`rapt_audit.utility.state_cache`; pooled encodings: :mod:`rapt_audit.encoder.encode`;
``bayes_inversion``'s choice)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Mapping

from rapt_audit.api.files import stable_hash
from rapt_audit.api.version import __version__


def code_digest(*modules: str | Path) -> str:
    """The package version and a hash of the source files ``modules``: the code that trains a network,
    in the signature of its cached weights, so that weights are reused only by the code that trained them."""
    digest = hashlib.sha256(__version__.encode("utf-8"))
    for module in modules:
        digest.update(Path(module).read_bytes())
    return digest.hexdigest()[:16]


def array_digest(*arrays: Any) -> str:
    """sha256 of arrays' dtypes, shapes and bytes, in order: the training data in a signature, in one short string."""
    import numpy as np  # lazy (numpy)

    digest = hashlib.sha256()
    for array in arrays:
        array = np.ascontiguousarray(array)
        digest.update(f"{array.dtype}{array.shape}".encode("ascii"))
        digest.update(array.tobytes())
    return digest.hexdigest()


def state_key(signature: Mapping[str, Any]) -> str:
    """A short stable digest of a signature (the entry's file name)."""
    return stable_hash(signature)[:16]

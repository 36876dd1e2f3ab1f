"""Trained weights cached on disk by the signature of everything that determines them.

A network whose training does not depend on the defense or η — the service's encoder adapted by
privacy-adaptive pretraining, the NER attack trained on clean text — is trained once per signature
and read back by every later run of a sweep (a paper-scale grid repeats it for each η and seed
otherwise). The signature holds what the weights depend on (model fingerprint, training data,
settings, seed); an entry that cannot be read is trained again with a warning, never trusted.
Reading an entry gives the very weights the training wrote, so results do not change.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import Any, Callable, Mapping

from rapt_audit.api.digests import state_key
from rapt_audit.api.files import write_cache_atomic


def cached_state(folder: Path, signature: Mapping[str, Any], *, train: Callable[[], tuple[Any, dict[str, Any]]],
                 restore: Callable[[dict[str, Any]], Any], device: str = "cpu",
                 state: Callable[[Any], Mapping[str, Any]] | None = None) -> tuple[Any, dict[str, Any], bool]:
    """The trained model for ``signature``: read from ``folder`` when stored, else trained and stored.

    Args:
        folder: The cache folder of this kind of network (``$RAPT_AUDIT_CACHE/<kind>``).
        signature: Everything the weights depend on (JSON-able).
        train: Trains the model; returns it and a JSON-able record of the training.
        restore: Builds the model from a stored ``state_dict``.
        device: Where the stored tensors are loaded.
        state: What of the trained model is stored (default: its whole ``state_dict``; a model whose
            backbone stays frozen stores only what training changed, and ``restore`` adds the rest).

    Returns:
        The model, the training record (the stored one on a hit) and whether it came from the cache.
    """
    import torch  # lazy (torch)

    path = folder / f"{state_key(signature)}.pt"
    if path.is_file():
        try:
            stored = torch.load(path, map_location=device, weights_only=True)
            return restore(stored["state"]), dict(stored["record"]), True
        except Exception as exc:  # noqa: BLE001 - any unreadable cache entry is rebuilt, never trusted
            warnings.warn(f"the cached weights {path} cannot be read ({exc}); training again", stacklevel=2)
    model, record = train()
    buffer = io.BytesIO()
    torch.save({"state": dict(state(model) if state is not None else model.state_dict()), "record": record, "signature": dict(signature)}, buffer)
    write_cache_atomic(path, lambda handle: handle.write(buffer.getvalue()))
    return model, record, False


__all__ = ["array_digest", "cached_state", "code_digest", "state_key"]

"""Privatized texts of the text defenses, stored on disk so that a cell run again never privatizes again.

A text defense privatizes every split it is given: the victim's training texts (utility), the test
texts (utility and the release), and the public data of adaptive attackers. Which words come out
depends only on the mechanism (its code and parameters, the effective η), the model, the run seed
and the records: not on how the service then trains (method, learning rate, epochs, precision...).
So a cell that changes only the training, or is run again with other attacks, reads the texts back
instead of privatizing them once more; at the ``smoke`` profile that is most of a warm run's time.

The key hashes the same run ingredients as the release cache (:func:`rapt_audit.pipeline.cache.run_state`
and the core's and the defense's code, :func:`~rapt_audit.api.components.release_code`) with the defense's
*mechanism* parameters in place of all of them. An entry
is one gzip'd JSON file under ``<cache_dir>/texts/<key[:2]>/<key>.json.gz``; one that cannot be read, or does not fit its
records, is privatized again after one warning, and one that cannot be written leaves the texts in
memory (:func:`rapt_audit.api.files.write_cache_json_gz`). Only an audit stores texts (never the
user's side), and ``--no-release-cache`` turns it off with the release cache.

May import: :mod:`rapt_audit.api`, :mod:`rapt_audit.mechanisms` and the pipeline's cache and context.
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from rapt_audit.api.files import read_cache_json_gz, stable_hash, write_cache_json_gz
from rapt_audit.api.params import to_jsonable
from rapt_audit.api.types import Record
from rapt_audit.mechanisms.calibration import ReplacementCount
from rapt_audit.api.components import release_code
from rapt_audit.pipeline.cache import records_digest, run_state
from rapt_audit.pipeline.context import RunContext

#: Bumped whenever what an entry holds or what its key hashes changes, so old entries are never read.
FORMAT = "rapt-audit/privatized-texts/3"  # 3: the key's code is per component (issue #62); 2: ``forced``

#: What ``compute`` returns and the store gives back: the released texts and what was replaced.
Privatized = tuple[list[str], ReplacementCount]


class TextReleaseStore:
    """Privatized texts on disk, keyed by what the privatization depends on (see the module docstring).

    Args:
        root: The folder of the entries (``<cache_dir>/texts``).
        ctx: The run context (model, device, seed and data directory enter the key).
        model_fingerprint: The weights fingerprint of ``ctx.model``.
    """

    def __init__(self, root: Path, *, ctx: RunContext, model_fingerprint: str) -> None:
        self.root = Path(root)
        self._run = {"format": FORMAT, **run_state(ctx, model_fingerprint=model_fingerprint)}
        self.hits = 0
        self.misses = 0

    def key(self, defense: Any, mechanism: Mapping[str, Any], eta: float | None, records: Sequence[Record]) -> str:
        """The key of ``records`` privatized by ``defense`` with ``mechanism`` parameters at ``eta`` (None: a
        mechanism without one)."""
        return stable_hash({**self._run, "code": release_code(type(defense)), "defense": defense.name,
                            "mechanism": to_jsonable(dict(mechanism)), "eta": to_jsonable(eta),
                            "records": records_digest(records)})

    def path(self, key: str) -> Path:
        """Where the entry of ``key`` lives."""
        return self.root / key[:2] / f"{key}.json.gz"

    def privatized(self, defense: Any, *, mechanism: Mapping[str, Any], eta: float | None, records: Sequence[Record],
                   compute: Callable[[], Privatized]) -> Privatized:
        """The stored privatization of ``records``, or ``compute()`` (then stored).

        Args:
            defense: The text defense (its name and the source of its package enter the key).
            mechanism: The parameters that shape the privatization (not the service's training).
            eta: The effective η (None for a mechanism without one).
            records: The records privatized; ``compute()`` must return one text per record.
            compute: Privatizes ``records``.
        """
        path = self.path(self.key(defense, mechanism, eta, records))
        stored = _read(path, len(records))
        if stored is not None:
            self.hits += 1
            return stored
        if path.exists():
            warnings.warn(f"the stored privatized texts in {path} cannot be read or do not fit their records; "
                          "privatizing them again", stacklevel=3)
        self.misses += 1
        texts, count = compute()
        write_cache_json_gz(path, {"format": FORMAT, "n": len(records), "texts": list(texts),
                                   "count": dataclasses.asdict(count)})
        return list(texts), count

    def report(self) -> dict[str, int]:
        """How many privatizations were read back (``hit``) and how many computed (``miss``)."""
        return {"hit": self.hits, "miss": self.misses}


def _read(path: Path, n: int) -> Privatized | None:
    """The entry at ``path`` when it holds ``n`` texts and a well-formed count; None otherwise."""
    doc = read_cache_json_gz(path)
    try:
        texts, count = doc["texts"], doc["count"]
        if doc["format"] != FORMAT or doc["n"] != n or len(texts) != n or not all(isinstance(t, str) for t in texts):
            return None
        return texts, ReplacementCount(**count)
    except (KeyError, TypeError):  # unreadable (None) or a document of another shape
        return None


__all__ = ["FORMAT", "TextReleaseStore"]

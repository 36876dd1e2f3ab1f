"""The decoding setting ``bayes_inversion`` chose, kept on disk by the signature of everything that decided it.

Choosing the setting decodes the attacker's validation texts once per grid point (7 of them at the cpu
profile) and counts a second n-gram prior on public text: most of the attack's fit (``reports/benchmarks.md``,
"Cost of the inversion attacks of issue 39"). The choice is a function of its inputs — the channel's pairs
(or η), the prior's texts, the attacker-valid views and texts, the attack's parameters, the seed, the public
model, the device and this code — so a run that meets the same inputs again (a re-run, a benchmark re-run on
code that changed elsewhere, an added attack) reads the choice back and builds only the chosen prior. Reading
it back gives the very setting the search chose, so results do not change. The entries sit beside the
trained attacks' weights (``$RAPT_AUDIT_CACHE/attacks/``); an entry that cannot be read is chosen again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from rapt_audit.api.context import RunContext
from rapt_audit.api.digests import array_digest, code_digest, state_key
from rapt_audit.api.files import read_cache_json_gz, stable_hash, write_cache_json_gz
from rapt_audit.attacks._token_views import TokenView
from rapt_audit.encoder.models import model_fingerprint
from rapt_audit.scoring import content_tokens as _content_tokens

#: The code that decides the choice: the attack, its model of channel and prior, its pools, the token views
#: and the content-token scorer the choice is made on.
CODE_VERSION = code_digest(*(Path(__file__).with_name(m) for m in (
    "bayes_inversion.py", "_bayes_model.py", "_bayes_embedding.py", "_token_views.py")), _content_tokens.__file__)

#: What an entry holds: the chosen setting's fields and the score of every setting tried.
_KEYS = ("setting", "scores")


def views_digest(views: Sequence[TokenView]) -> str:
    """sha256 of the views' original rows, released ids (or vectors) and alignments, in order."""
    arrays: list[np.ndarray] = []
    for view in views:
        released = view.released_ids if view.released_ids is not None else view.released_vectors
        arrays += [view.original_rows, np.asarray(released), view.alignment]
    return array_digest(*arrays)


def rows_digest(rows: Sequence[np.ndarray]) -> str:
    """sha256 of a list of token-row sequences (their lengths and their rows)."""
    lengths = np.array([len(r) for r in rows], dtype=np.int64)
    return array_digest(lengths, np.concatenate(rows) if rows else np.zeros(0, np.int64))


def signature(*, params: Mapping[str, Any], channel: str, own_rows: Sequence[np.ndarray], public: str,
              public_texts: Sequence[str], valid_views: Sequence[TokenView], valid_texts: Sequence[str],
              ctx: RunContext) -> dict[str, Any]:
    """Everything the choice depends on, JSON-able. ``channel`` is a digest of the shadow pairs (texts) or
    η (token embeddings); ``public_texts`` are the public sentences offered to the prior, untokenised (the
    model fingerprint stands for their tokenisation)."""
    return {"attack": "bayes_inversion", "params": dict(params), "channel": channel,
            "own_rows": rows_digest(own_rows), "public": public, "public_texts": stable_hash(list(public_texts)),
            "valid_views": views_digest(valid_views), "valid_texts": stable_hash(list(valid_texts)),
            "model": model_fingerprint(ctx.model, cache_dir=ctx.cache_dir), "seed": ctx.seed,
            "device": ctx.device, "code": CODE_VERSION}


def _path(sig: Mapping[str, Any], ctx: RunContext) -> Path:
    return Path(ctx.cache_dir) / "attacks" / f"bayes-{state_key(sig)}.json.gz"


def read_choice(sig: Mapping[str, Any], *, ctx: RunContext) -> dict[str, Any] | None:
    """The stored choice for ``sig`` (``{"setting": {...}, "scores": {...}}``), or None when there is none or
    it is not whole (then the caller chooses again and stores anew)."""
    stored = read_cache_json_gz(_path(sig, ctx))
    # compared as stored: JSON turns the parameters' tuples into lists
    if not isinstance(stored, dict) or stored.get("signature") != json.loads(json.dumps(dict(sig))):
        return None
    if not all(isinstance(stored.get(key), dict) for key in _KEYS):
        return None
    return {key: stored[key] for key in _KEYS}


def store_choice(sig: Mapping[str, Any], setting: Mapping[str, Any], scores: Mapping[str, Any], *,
                 ctx: RunContext) -> bool:
    """Keep the choice for ``sig``; returns whether it was stored (a read-only cache is not an error)."""
    return write_cache_json_gz(_path(sig, ctx), {"signature": dict(sig), "setting": dict(setting),
                                                 "scores": {k: list(v) for k, v in scores.items()}})

"""η calibrated for a target replacement probability, stored on disk (issue #29: work shared across cells).

Calibration privatizes the public calibration text a dozen times or more (``find_eta``'s bisection):
30–50 s per text defense at the ``cpu`` profile on a 2-core machine, paid again by every run of a sweep
or a benchmark that names the same ``replacement`` target. The η it finds depends only on the
mechanism (the defense's class and its release parameters), the public text, the seed the
calibration draws its noise from, the public model and the code a release can run (the release
cache's :func:`~rapt_audit.api.components.release_code`); it is stored under that signature and
read back, so a later run gets exactly the η the first one computed.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from rapt_audit.api.context import RunContext
from rapt_audit.api.components import release_code
from rapt_audit.api.files import read_cache_json_gz, stable_hash, write_cache_json_gz
from rapt_audit.data.public import public_corpus
from rapt_audit.defenses._pretraining import mechanism_parameters
from rapt_audit.encoder.models import model_fingerprint
from rapt_audit.mechanisms.analysis_pack import texts_digest
from rapt_audit.mechanisms.calibration import find_eta

#: Bumped when the stored document's shape changes.
FORMAT = "calibrated-eta/2"  # 2: the key's code is the core's and the defense's digests (issue #62)


def calibrated_eta(defense: Any, mechanism: Mapping[str, Any], *, target: float, corpus: str, texts: Sequence[str],
                   seed: int, ctx: RunContext, compute: Callable[[], float]) -> float:
    """The η ``compute()`` finds for ``defense``'s target, read from ``ctx.cache_dir/calibration`` when stored.

    Args:
        defense: The text defense being calibrated (its name and class enter the signature).
        mechanism: Its release parameters other than η and the target.
        target: The replacement probability calibrated for.
        corpus: The public calibration text's name; ``texts`` its sentences (their digest is in the key).
        seed: The seed calibration draws its noise from.
        ctx: The run context (cache folder, model, tallies: ``env.release_cache.calibration``).
        compute: Runs the calibration (:func:`rapt_audit.mechanisms.calibration.find_eta`).
    """
    signature = {"format": FORMAT, "defense": defense.name, "mechanism": dict(mechanism), "target": target,
                 "corpus": corpus, "texts": texts_digest(list(texts)), "seed": seed,
                 "model": model_fingerprint(ctx.model, cache_dir=ctx.cache_dir),
                 "code": release_code(type(defense))}
    path = Path(ctx.cache_dir) / "calibration" / f"{stable_hash(signature)[:24]}.json.gz"
    stored = read_cache_json_gz(path)
    if isinstance(stored, dict) and stored.get("signature") == signature:
        eta = stored.get("eta")
        if isinstance(eta, float) and math.isfinite(eta) and eta > 0:
            ctx.tally("calibration", "hit")
            return eta
    eta = float(compute())
    write_cache_json_gz(path, {"signature": signature, "eta": eta})
    ctx.tally("calibration", "miss")
    return eta


def calibrate_for_target(defense: Any, *, target: float, ctx: RunContext, parameter: str = "eta"
                         ) -> tuple[float, dict[str, Any]]:
    """The value of ``defense``'s privacy parameter whose replacement probability on public text is ``target``.

    The defense counts replacements with ``replacement_count(texts, eta=value, rng=, ctx=)`` (its own parameter:
    η for the dχ defenses, ε for the word mechanisms); :func:`~rapt_audit.mechanisms.calibration.find_eta`
    searches the value, stored on disk by :func:`calibrated_eta`.

    Returns:
        The value, and the record for the release's facts (``calibrated_<parameter>``, the corpus).
    """
    corpus_name, texts = public_corpus(ctx)
    seed = ctx.seed_for("calibration", defense.name)
    value = calibrated_eta(  # stored on disk: a later run with the same target reads it back
        defense, mechanism_parameters(defense), target=target, corpus=corpus_name, texts=texts, seed=seed, ctx=ctx,
        compute=lambda: find_eta(lambda v, rng: defense.replacement_count(texts, eta=v, rng=rng, ctx=ctx), target,
                                 seed=seed))
    return value, {"target_replacement": target, f"calibrated_{parameter}": value, "calibration_corpus": corpus_name,
                   "calibration_sentences": len(texts)}


__all__ = ["FORMAT", "calibrate_for_target", "calibrated_eta"]

"""The service side of privacy-adaptive pretraining for the text defenses (Qu et al., CIKM 2021, Sec. 3.4).

With ``pretrain=vanilla|prob|denoise`` a text defense's service first adapts its encoder to text
privatized *by the defense's own mechanism at the η in force* — public text, never the victim's —
and then customizes the adapted encoder as usual (:mod:`rapt_audit.utility.pretraining` holds the
objectives and the training). Pretraining changes the service's model only: the release, and so
every attack, is exactly what it is without it.

The adapted encoder is cached on disk under the run's cache folder, keyed by everything that
determines it (model weights, corpus and its fingerprint, mechanism and its parameters, η, objective,
settings, run seed), so the cells of a sweep that differ only in the customization method or in the
attacks train it once. The record in the result describes that training (its loss curve and time),
whether this run trained the encoder or read it from the cache.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import time
from pathlib import Path
from typing import Any, Protocol, Sequence

import numpy as np

from rapt_audit.api.context import RunContext
from rapt_audit.api.digests import state_key
from rapt_audit.api.errors import DataError
from rapt_audit.api.params import get_params, scoped_parameter
from rapt_audit.data import load_dataset
from rapt_audit.defenses._customization import SERVICE_PARAMETERS
from rapt_audit.mechanisms.align import align
from rapt_audit.utility.pretraining import AlignedText, pretrain_encoder, resolve_pretrain_settings
from rapt_audit.utility.state_cache import cached_state



class PretrainedDefense(Protocol):
    """What privacy-adaptive pretraining reads of its defense.

    :class:`rapt_audit.defenses._dchi_text.DchiTextDefense` has these members; it is named by this
    protocol because that module builds on this one, which therefore cannot import it back.
    """

    name: str
    pretrain: str
    pretrain_steps: int | None
    pretrain_corpus: str | None

    def privatize(self, texts: Sequence[str], *, eta: float, rng: np.random.Generator,
                  ctx: RunContext) -> tuple[list[str], Any]:
        """The privatized texts and the mechanism's replacement count."""

    def effective_eta(self, ctx: RunContext) -> float:
        """The η in force (calibrated from a replacement target where one is set)."""

#: Parameters of a text defense that shape the service's training, not the mechanism (left out of the
#: pretraining cache key and of the stored privatized texts' key: a cell that changes only these reuses
#: the adapted encoder and the texts). ``eta`` and ``replacement`` enter those keys as the effective η.
TRAINING_PARAMETERS = SERVICE_PARAMETERS | {"eta", "replacement", "rec_hidden", "rec_weight", "reconstruction",
                                             "rec_vocab"}


def mechanism_parameters(defense: Any) -> dict[str, Any]:
    """The parameters of the text defense ``defense`` that shape what it releases (all but the training's and
    pretraining's)."""
    return {k: v for k, v in get_params(defense).items()
            if k not in TRAINING_PARAMETERS and not k.startswith("pretrain")}

_NOT_APPLICABLE = ("privacy-adaptive pretraining (Qu et al., CIKM 2021) adapts the service's language model to "
                   "privatized text by masked-language modelling, and this defense releases vectors, not text, so "
                   "there is no privatized text to pretrain on; use it with t2t, pct2t or rapt and "
                   "method=prompt|prefix|lora|full")
for _key in ("pretrain", "pretrain_steps", "pretrain_corpus"):
    scoped_parameter(_key, _NOT_APPLICABLE)


def read_corpus(ctx: RunContext, path: str | None) -> tuple[str, str, list[str]]:
    """``(name, fingerprint, texts)`` of the public pretraining corpus, read once per run.

    ``path``: a UTF-8 text file, one passage per line; None: WikiText-2 from the data directory.

    Raises:
        DataError: a missing or empty corpus, with how to provide one.
    """
    return ctx.shared(("pretraining-corpus", path), lambda: _read_corpus(ctx, path))


def _read_corpus(ctx: RunContext, path: str | None) -> tuple[str, str, list[str]]:
    if path is not None:
        file = Path(path).expanduser()
        if not file.is_file():
            raise DataError(f"pretraining corpus {file} does not exist; pass a UTF-8 text file with one passage per "
                            "line as pretrain_corpus=PATH, or leave it unset to use WikiText-2 from the data directory")
        data = file.read_bytes()
        try:
            texts = [line.strip() for line in data.decode("utf-8").splitlines() if line.strip()]
        except UnicodeDecodeError as exc:
            raise DataError(f"pretraining corpus {file} is not UTF-8 (byte {exc.start}); convert it to UTF-8") from None
        if not texts:
            raise DataError(f"pretraining corpus {file} holds no text (every line is blank); give it public text, "
                            "one passage per line")
        return file.name, hashlib.sha256(data).hexdigest(), texts
    try:
        dataset = load_dataset("wikitext2", ctx.data_dir)
    except DataError as exc:
        raise DataError(f"privacy-adaptive pretraining needs public text and WikiText-2 is unavailable ({exc}); "
                        "set the data directory (--data-dir or RAPT_AUDIT_DATA) or pass pretrain_corpus=PATH") from None
    return dataset.name, dataset.fingerprint, [r.text for r in dataset.records]


def aligned_privatizations(defense: PretrainedDefense, texts: Sequence[str], *, copies: int, eta: float,
                           rng: np.random.Generator, ctx: RunContext) -> list[AlignedText]:
    """Each text privatized ``copies`` times with the defense's mechanism, aligned word by word with the original.

    Words are the whitespace-separated units of each text; released words are aligned with original
    ones on their lower-cased forms (:func:`rapt_audit.mechanisms.align.align`), as the attacks align them.
    """
    originals = [tuple(t.split()) for t in texts]
    runs = [[tuple(r.split()) for r in defense.privatize(list(texts), eta=eta, rng=rng, ctx=ctx)[0]]
            for _ in range(copies)]
    out = []
    for i, words in enumerate(originals):
        released = tuple(run[i] for run in runs)
        sources = []
        for words_k in released:
            source: list[int | None] = [None] * len(words_k)
            for o, j in enumerate(align([w.lower() for w in words], [w.lower() for w in words_k])):
                if j is not None:
                    source[j] = o
            sources.append(tuple(source))
        out.append(AlignedText(words, released, tuple(sources)))
    return out


def adapted_encoder(defense: PretrainedDefense, ctx: RunContext) -> tuple[Any, dict[str, Any]]:
    """The service's encoder after privacy-adaptive pretraining (from the cache when it was trained before).

    Returns:
        A ``LoadedModel`` sharing the public model's tokenizer and path, holding the adapted weights,
        and the record of the pretraining for the result file.
    """

    settings = resolve_pretrain_settings(defense.pretrain, ctx.profile, {"steps": defense.pretrain_steps})
    eta = defense.effective_eta(ctx)
    corpus, corpus_fingerprint, texts = read_corpus(ctx, defense.pretrain_corpus)
    loaded = ctx.service()  # the service pretrains its own model on the client's privatized public text
    signature = {"model": loaded.fingerprint, "corpus": corpus, "corpus_fingerprint": corpus_fingerprint,
                 "defense": defense.name, "mechanism": mechanism_parameters(defense),
                 "eta": "inf" if eta == float("inf") else eta, "settings": settings.to_dict(), "seed": ctx.seed}
    key = state_key(signature)
    # The stored weights depend on the precision they were trained in; the seeds (from ``key``) do not,
    # so an fp32 and a bf16 run of one cell draw the same batches and masks.
    signature["precision"] = ctx.precision
    record = {"objective": settings.objective, "settings": settings.to_dict(), "corpus": corpus,
              "eta": signature["eta"], "key": key,
              "note": "pretraining changes the service's model, not the release: every attack is unchanged"}

    def train() -> tuple[Any, dict[str, Any]]:
        started = time.perf_counter()
        rng = ctx.rng("pretrain", defense.name, settings.objective)
        picked = rng.choice(len(texts), size=min(settings.texts_needed, len(texts)), replace=False)
        aligned = aligned_privatizations(defense, [texts[i] for i in sorted(picked)],
                                         copies=settings.perturbations, eta=eta, rng=rng, ctx=ctx)
        model, curve = pretrain_encoder(loaded, aligned, settings, seed=ctx.seed_for("pretrain", key),
                                        precision=ctx.precision)
        return model, {"corpus_texts": len(aligned), "loss_curve": curve,
                       "train_seconds": round(time.perf_counter() - started, 2)}

    def restore(state: dict[str, Any]) -> Any:
        model = copy.deepcopy(loaded.model)
        model.load_state_dict(state)
        return model.eval()

    def build() -> tuple[Any, dict[str, Any]]:
        model, found, _ = cached_state(ctx.cache_dir / "pretrained", signature, train=train, restore=restore,
                                       device=loaded.device)
        return _adapted(loaded, model, key), found

    adapted, found = ctx.shared(("pretrained", key), build)
    return adapted, {**record, **found}


def _adapted(loaded: Any, model: Any, key: str) -> Any:
    """``loaded`` with ``model`` in place of the public encoder (same tokenizer; a fingerprint that says so)."""
    return dataclasses.replace(loaded, model=model, fingerprint=f"{loaded.fingerprint}+pretrain:{key}")

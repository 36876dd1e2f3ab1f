"""Token-embedding privatization: the user releases noisy token embeddings (dχ noise on each token's row)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Sequence

import numpy as np

from rapt_audit.api.capabilities import TOKEN_VECTORS, Capabilities
from rapt_audit.api.context import RunContext
from rapt_audit.api.params import Check
from rapt_audit.api.plugins import DEFENSES
from rapt_audit.defenses._token_embedding import TokenEmbeddingDefense
from rapt_audit.mechanisms.calibration import ReplacementCount
from rapt_audit.mechanisms.engines import token_engine
from rapt_audit.mechanisms.noise import check_eta, dchi_noise


@DEFENSES.register("embedding", tags=("embeddings", "dchi"))
@dataclass
class EmbeddingDefense(TokenEmbeddingDefense):
    """Token-embedding privatization (Qu et al., CIKM 2021 "token representation" M_rep; SnD's TokEmbPriv).

    Each token of the text (model tokenizer, no special tokens) is replaced by its input embedding
    plus fresh dχ noise, and the noisy vectors are released. Unknown characters are sent as the
    noisy [UNK] embedding (their identity was lost by the tokenizer before any privacy).

    The service is Qu et al.'s (Sec. 3.3, Fig. 1.c; Table 4's Token Rep): it receives the privatized
    training release and labels, puts [CLS] and [SEP] around each sequence itself (clean, from its own
    table), feeds the released vectors as the input embeddings of the text's positions (position
    embeddings are added by the encoder as usual) and customizes the public encoder on them by
    ``method`` — prompt tuning by default, ``prefix``, ``lora`` or ``full`` — exactly as the text
    defenses' services do (same settings, learning rate and epoch chosen on a validation split of the
    privatized training release, never the test split); it then answers the privatized test release.
    At η = ∞ the released vectors are the embedding rows of the tokens, so this is ``identity``'s
    service with the same method (the tokens are the same), the check the benchmark relies on.

    Departures from Qu et al.: prompt tuning of MiniLM by default rather than full fine-tuning of
    BERT-base (the benchmark customizes text and token-embedding releases the same way; ``method=full``
    is theirs); under ``full`` the service may train its own [CLS]/[SEP] rows, which Qu et al. freeze
    with the user-side table (the released vectors are fixed input either way); only ``text`` is
    privatized (a record's ``text_pair`` is not sent). ``method=probe`` keeps the earlier, cheaper
    measure: a logistic-regression probe on the frozen encoder's mean-pooled output of the released
    vectors, a service that does not adapt to noise.

    Attributes:
        eta: dχ privacy parameter (> 0; ``inf`` means no noise).
        method: ``prompt`` (default), ``prefix``, ``lora``, ``full``, or ``probe``.
        decode_nearest: The service first maps each released vector to its nearest regular vocabulary
            token and customizes on those tokens' own embedding rows. That is post-processing of the
            release (no privacy cost; T2T is the same decoding done by the user). Qu et al.'s service does
            not decode, and their Table 4 reports it at chance at η = 100 (BERT, SST-2: 0.5298): the noise
            moves a vector far from its token while the nearest token is mostly still the right one
            (``reports/fidelity.md``, item 3). Off by default, for fidelity to the paper.
        epochs, lr, lr_grid, patience, batch_size, max_length, virtual_tokens, precision: The service's
            customization (:class:`~rapt_audit.defenses._customization.Customized`).

    The service, the release and its memoisation are the base's
    (:class:`~rapt_audit.defenses._token_embedding.TokenEmbeddingDefense`); this class adds η and the noise.
    """

    capabilities: ClassVar[Capabilities] = Capabilities(audit=TOKEN_VECTORS, figure_place=4)
    audit_description: ClassVar[str] = "the noisy embedding of one token"

    eta: Annotated[float, Check(check_eta)] = 100.0

    def perturb(self, vectors: list[np.ndarray], *, rng: np.random.Generator, ctx: RunContext) -> list[np.ndarray]:
        """Each row plus fresh dχ noise at η (none at η = ∞), drawn for the whole batch in one call."""
        if not vectors:
            return []
        # One draw for the batch's rows in order: the noise each token gets is that of the releases made
        # before the base existed (a per-text draw would change every release at a given seed).
        flat = np.concatenate(vectors)
        if not math.isinf(self.eta):
            flat += dchi_noise(len(flat), flat.shape[1], self.eta, rng, dtype=np.float32)
        return np.split(flat, np.cumsum([len(v) for v in vectors])[:-1])

    def noisy_embeddings(self, texts: Sequence[str], *, rng: np.random.Generator, ctx: RunContext) -> list[np.ndarray]:
        """One float32 ``(n_tokens, d)`` array of noisy embeddings per text (the base's ``released_vectors``)."""
        return self.released_vectors(texts, rng=rng, ctx=ctx)

    def mechanism_facts(self, ctx: RunContext) -> dict[str, Any]:
        """η, recorded in the release (``inf`` as a string: JSON has no infinity)."""
        return {"eta": "inf" if math.isinf(self.eta) else self.eta}

    def replacement_count(self, texts: Sequence[str], *, eta: float, rng: np.random.Generator,
                          ctx: RunContext) -> ReplacementCount:
        """How often the nearest vocabulary token of a noisy embedding differs from the original token."""
        engine = token_engine(ctx)
        flat = np.concatenate([np.asarray(i, dtype=np.int64) for i in engine.token_ids(texts)] or [np.zeros(0, np.int64)])
        rows = engine.privatize_ids(flat, eta=eta, rng=rng)
        return ReplacementCount(perturbed=len(flat), replaced=int((engine.space.token_ids[rows] != flat).sum()))

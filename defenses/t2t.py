"""T2T: text-to-text dχ privatization over the model vocabulary."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, ClassVar, Literal, Sequence

import numpy as np

from rapt_audit.api.params import Check
from rapt_audit.api.plugins import DEFENSES
from rapt_audit.defenses._text import TextDefense
from rapt_audit.mechanisms.calibration import ReplacementCount
from rapt_audit.mechanisms.engines import tagger, token_engine, word_engine
from rapt_audit.mechanisms.privatize import check_unk_policy
from rapt_audit.pipeline.context import RunContext


@DEFENSES.register("t2t", tags=("text", "dchi"))
@dataclass
class T2TDefense(TextDefense):
    """T2T privatization (Feyisetan et al., WSDM 2020; Qu et al., CIKM 2021 M_txt).

    Each unit's embedding receives dχ noise (density ∝ exp(-η‖z‖)) and is replaced by the nearest
    regular vocabulary entry. ``unit="token"`` (default, as Qu et al.) privatizes every WordPiece
    token; ``unit="word"`` privatizes every word, represented by the mean of its sub-token
    embeddings and decoded among whole-word tokens. Unknown input follows ``unk_policy`` (see
    :mod:`rapt_audit.mechanisms.privatize`). The number of units is released as is (length is not protected).
    """

    name: ClassVar[str] = "t2t"
    unit: Literal["token", "word"] = "token"
    unk_policy: Annotated[str, Check(check_unk_policy)] = "privatize"

    def privatize(self, texts: Sequence[str], *, eta: float, rng: np.random.Generator,
                  ctx: RunContext) -> tuple[list[str], ReplacementCount]:
        """Privatize each text token by token (or word by word)."""
        if self.unit == "token":
            out, _, count = token_engine(ctx).privatize_texts(texts, eta=eta, rng=rng, unk_policy=self.unk_policy)
            return out, count
        # Word level: spaCy's tokenizer gives word boundaries (no tagging needed).
        nlp = tagger(ctx)
        docs = [nlp.make_doc(t) for t in texts]
        words = [tok.text for doc in docs for tok in doc if not tok.is_space]
        released, count = word_engine(ctx, "word").privatize_words(words, ["word"] * len(words), eta=eta, rng=rng)
        it = iter(released)
        out = ["".join((tok.text if tok.is_space else next(it)) + tok.whitespace_ for tok in doc) for doc in docs]
        return out, count

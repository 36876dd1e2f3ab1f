"""T2T: text-to-text dχ privatization over the model vocabulary."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, ClassVar, Literal, Sequence

import numpy as np

from rapt_audit.api.capabilities import DCHI_VOCABULARY, Capabilities
from rapt_audit.api.context import RunContext
from rapt_audit.api.params import Check
from rapt_audit.api.plugins import DEFENSES
from rapt_audit.defenses._dchi_text import DchiTextDefense
from rapt_audit.mechanisms.calibration import ReplacementCount
from rapt_audit.mechanisms.analyses import words
from rapt_audit.mechanisms.engines import token_engine, word_engine
from rapt_audit.mechanisms.privatize import check_unk_policy


@DEFENSES.register("t2t", tags=("text", "dchi"))
@dataclass
class T2TDefense(DchiTextDefense):
    """T2T privatization (Feyisetan et al., WSDM 2020; Qu et al., CIKM 2021 M_txt).

    Each unit's embedding receives dχ noise (density ∝ exp(-η‖z‖)) and is replaced by the nearest
    regular vocabulary entry. ``unit="token"`` (default, as Qu et al.) privatizes every WordPiece
    token; ``unit="word"`` privatizes every word, represented by the mean of its sub-token
    embeddings and decoded among whole-word tokens. Unknown input follows ``unk_policy`` (see
    :mod:`rapt_audit.mechanisms.privatize`). The number of units is released as is (length is not protected).
    """

    capabilities: ClassVar[Capabilities] = Capabilities(audit=DCHI_VOCABULARY, figure_place=1)
    audit_description: ClassVar[str] = "the released token of one token (unit=token) or word of one word (unit=word)"

    unit: Literal["token", "word"] = "token"
    unk_policy: Annotated[str, Check(check_unk_policy)] = "privatize"

    def privatize(self, texts: Sequence[str], *, eta: float, rng: np.random.Generator,
                  ctx: RunContext) -> tuple[list[str], ReplacementCount]:
        """Privatize each text token by token (or word by word)."""
        if self.unit == "token":
            out, _, count = token_engine(ctx).privatize_texts(texts, eta=eta, rng=rng, unk_policy=self.unk_policy)
            return out, count
        # Word level: spaCy's tokenizer gives word boundaries (no tagging needed).
        rows = words(ctx, texts)
        units = [word for row in rows for word, _ in row if not word.isspace()]
        released, count = word_engine(ctx, "word").privatize_words(units, ["word"] * len(units), eta=eta, rng=rng)
        it = iter(released)
        out = ["".join((word if word.isspace() else next(it)) + space for word, space in row) for row in rows]
        return out, count

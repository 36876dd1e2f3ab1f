"""RAPT: PCT2T privatization + parameter-efficient customization + privatized token reconstruction."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Literal, Mapping, Sequence

import numpy as np

from rapt_audit.api.capabilities import DCHI_POS, Capabilities
from rapt_audit.api.context import RunContext
from rapt_audit.api.errors import UsageError
from rapt_audit.api.params import Check, Range
from rapt_audit.api.plugins import DEFENSES
from rapt_audit.api.types import Record, Release
from rapt_audit.defenses._customization import HEAD
from rapt_audit.defenses.pct2t import PCT2TDefense
from rapt_audit.encoder.vocab import embedding_space
from rapt_audit.mechanisms.engines import pos_candidates, word_engine
from rapt_audit.utility.customize import METHODS, PlainTokens, check_method


def check_rapt_method(method: str) -> str:
    """A customization method; ``bow`` and ``head`` are refused because RAPT trains the encoder."""
    if method in ("bow", HEAD):
        raise UsageError(f"rapt trains the encoder, so method={method} is not available; choose one of: "
                         + ", ".join(METHODS))
    return check_method(method)


@DEFENSES.register("rapt", tags=("text", "dchi", "pos", "peft"))
@dataclass
class RAPTDefense(PCT2TDefense):
    """RAPT (Li, Tan, Branco, Liu, v3 Sec. III): PCT2T + prompt/prefix/LoRA customization + reconstruction.

    The user prepends m fixed **plain tokens** to every text and privatizes them together with it
    by PCT2T; the release the eavesdropper sees is that privatized text, plain tokens included. The
    service customizes the public encoder with ``method`` (prompt, prefix, lora or full) and a
    reconstruction head ``softmax(W_down · W_up · g)`` (hidden ``rec_hidden``) that predicts the
    original plain tokens from their hidden states (loss L_task + L_rec); the task head reads the mean
    of the other hidden states. The head is dropped after training. Users privatize, and prepend the
    plain tokens, at inference too.

    Plain tokens are drawn uniformly, once per run seed (so fixed for the task), from the alphabetic
    whole-word vocabulary entries of the selected POS categories; alphabetic so that each is exactly
    one word and one token for the model. They are public by design, recorded in the release, and
    attacks read only the text after them. ``rec_vocab="categories"`` (default) makes the head's
    vocabulary all vocabulary words of the selected categories: 19,343 words for MiniLM's vocabulary
    and RAPT's four categories, close to the paper's 19,369 for BERT (whose construction the paper
    does not detail); ``"vocabulary"`` uses every regular whole-word token.

    ``rec_weight`` scales L_rec: 1 in the paper, where L_rec is a sum over the m plain tokens and starts
    near m·ln|V_r| ≈ 395 against L_task ≈ ln 2; ``rec_weight=0.025`` (= 1/m) averages it instead.

    Ablations (RAPT Table VIII): ``reconstruction=false`` keeps the plain tokens without L_rec;
    ``plain_tokens=0`` drops them entirely (then there is nothing to reconstruct, and the defense is
    PCT2T + the customization method).
    """

    #: At most one epoch keeps the smoke profile (CI, conformance tests) to seconds; the validation split
    #: is still carved and scored, so the smoke run goes through the same selection code as the others.
    profiles: ClassVar[Mapping[str, Mapping[str, Any]]] = {"smoke": {"epochs": 1}}
    capabilities: ClassVar[Capabilities] = Capabilities(audit=DCHI_POS, figure_place=3, own_service=(
        "RAPT's service adds the user's plain tokens and a reconstruction head to prompt tuning (the paper's design), "
        "so its ceiling is its own"))
    audit_description: ClassVar[str] = "PCT2T's released word, which RAPT uses for the text and its plain tokens"
    method: Annotated[str, Check(check_rapt_method)] = "prompt"
    plain_tokens: Annotated[int, Range(0, note="40 in the paper")] = 40
    reconstruction: bool = True
    rec_hidden: Annotated[int, Range(1, note="96 in the paper")] = 96
    rec_weight: float = 1.0
    rec_vocab: Literal["categories", "vocabulary"] = "categories"
    _plain: PlainTokens | None = field(default=None, init=False, repr=False)
    _plain_categories: list[str] = field(default_factory=list, init=False, repr=False)

    @property
    def variant(self) -> str:
        """``rapt``, or the name of the ablation these settings amount to."""
        if self.plain_tokens == 0:
            return "without_plain_tokens"
        return "rapt" if self.reconstruction else "without_reconstruction"

    def plain(self, ctx: RunContext) -> tuple[PlainTokens, list[str]]:
        """The plain tokens (with their reconstruction-vocabulary indices) and each one's POS category."""
        if self._plain is None or len(self._plain.words) != self.plain_tokens:
            space = embedding_space(ctx)
            candidates = pos_candidates(ctx)
            # Plain tokens and the head's vocabulary are vocabulary words (RAPT's |V_r|), not the words
            # PCT2T's lexicon holds only as sub-word pieces.
            category_of_word = {space.tokens[row]: category for category in self.categories
                                for row in candidates.space_rows(category).tolist()}
            if self.rec_vocab == "categories":
                vocabulary = sorted(category_of_word)
            else:
                vocabulary = sorted(t for t, cont in zip(space.tokens, space.is_continuation) if not cont)
            eligible = sorted(w for w in category_of_word if w.isalpha())
            if not eligible:
                raise UsageError(f"POS categories {', '.join(self.categories)} have no alphabetic vocabulary "
                                 "words to draw plain tokens from; select other categories")
            rng = np.random.default_rng(ctx.seed_for("plain-tokens", self.categories))
            words = tuple(eligible[i] for i in rng.choice(len(eligible), size=self.plain_tokens, replace=True))
            index = {w: i for i, w in enumerate(vocabulary)}
            self._plain = PlainTokens(words, tuple(index[w] for w in words), len(vocabulary))
            self._plain_categories = [category_of_word[w] for w in words]
        return self._plain, self._plain_categories

    def add_public_prefix(self, texts: list[str], *, rng: np.random.Generator, ctx: RunContext) -> list[str]:
        """Prepend each text's own PCT2T privatization of the plain tokens at the η in force (fresh noise per text).

        An empty text stays empty: the user sends nothing, so there is nothing to prefix.
        """
        sent = [i for i, text in enumerate(texts) if text]
        if self.plain_tokens == 0 or not sent:
            return texts

        plain, categories = self.plain(ctx)
        m = len(plain.words)
        released, _ = word_engine(ctx, "pos").privatize_words(list(plain.words) * len(sent), categories * len(sent),
                                                              eta=self.effective_eta(ctx), rng=rng)
        out = list(texts)
        for k, i in enumerate(sent):
            out[i] = " ".join(released[k * m:(k + 1) * m]) + " " + texts[i]
        return out

    def customization_options(self, ctx: RunContext) -> dict[str, Any]:
        """The plain tokens, the reconstruction switch and the head size for the service's training."""
        return {"plain": self.plain(ctx)[0] if self.plain_tokens else None, "reconstruction": self.reconstruction,
                "extra_settings": {"rec_hidden": self.rec_hidden, "rec_weight": self.rec_weight}}

    def release(self, records: Sequence[Record], *, ctx: RunContext) -> Release:
        """PCT2T's release with the privatized plain tokens in front (and the protocol facts in ``meta``)."""
        base = super().release(records, ctx=ctx)
        meta: dict[str, Any] = {**base.meta, "variant": self.variant, "method": self.method,
                                "plain_prefix_words": self.plain_tokens}
        if self.plain_tokens:
            plain, _ = self.plain(ctx)
            meta.update(plain_tokens=list(plain.words), rec_vocabulary_size=plain.vocabulary_size)
        return Release(uids=base.uids, texts=base.texts, meta=meta)

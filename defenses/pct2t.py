"""PCT2T: RAPT's part-of-speech constrained text-to-text privatization."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Annotated, ClassVar, Sequence

import numpy as np

from rapt_audit.api.capabilities import DCHI_POS, Capabilities
from rapt_audit.api.context import RunContext
from rapt_audit.api.params import Check
from rapt_audit.api.plugins import DEFENSES
from rapt_audit.defenses._dchi_text import DchiTextDefense
from rapt_audit.mechanisms.calibration import ReplacementCount
from rapt_audit.mechanisms.analyses import pos_tags
from rapt_audit.mechanisms.engines import word_engine
from rapt_audit.mechanisms.pos import DEFAULT_CATEGORIES, TaggedWord, category_of, resolve_categories
from rapt_audit.mechanisms.privatize import normalize_word, split_bidi


@DEFENSES.register("pct2t", tags=("text", "dchi", "pos"))
@dataclass
class PCT2TDefense(DchiTextDefense):
    """PCT2T (Li, Tan, Branco, Liu, RAPT v3 Sec. III-A2): dχ word replacement within POS categories.

    Words are tagged with spaCy's tagger. Only words in the selected categories are perturbed: a
    word's vector is the mean of its sub-token embeddings, receives dχ noise, and is replaced by the
    nearest candidate word **of the same category** (candidate lexicons: the model's whole-word
    vocabulary and the public words it holds only as sub-word pieces, embedded as the mean of their
    pieces (RAPT Eq. 2), each word in the category of its isolated tag and in every category public
    text tags it with; never from the protected data, :func:`rapt_audit.mechanisms.pos.vocabulary_lexicon`).
    A word no candidate of its category equals (a name, a misspelling, a word no public list holds) is
    replaced at every finite η; the count says how many (``forced``). Words in other categories are
    released unchanged, in the clear: that is the method's utility/privacy trade (RAPT Sec. V-E).
    Categories: noun (incl. proper nouns), verb, pronoun, preposition (RAPT's default), adjective,
    adverb, determiner, conjunction, symbol, numeral, auxiliary, particle, interjection,
    punctuation, other, or ``all``.
    """

    capabilities: ClassVar[Capabilities] = Capabilities(audit=DCHI_POS, figure_place=2)
    audit_description: ClassVar[str] = "the released word of one word, within its POS category"

    categories: Annotated[tuple[str, ...], Check(resolve_categories)] = DEFAULT_CATEGORIES

    def claims_support(self) -> bool:
        """True: a word is always released as a word of its own POS category (``rapt-audit audit`` checks it)."""
        return True

    def privatize_words(self, texts: Sequence[str], *, eta: float, rng: np.random.Generator, ctx: RunContext
                        ) -> tuple[list[list[TaggedWord]], list[list[str]], ReplacementCount]:
        """Tag ``texts`` and return, per text, the tagged words and the released word for each."""
        tagged = pos_tags(ctx, texts)
        selected = set(self.categories)
        words, groups, where = [], [], []
        passed: Counter[str] = Counter()  # words released in the clear, by category
        for t, sentence in enumerate(tagged):
            for w, word in enumerate(sentence):
                category = category_of(word.upos)
                # A unit of directional controls alone is no word: it passes as written (see split_bidi).
                if category in selected and split_bidi(word.text)[1]:
                    words.append(word.text)
                    groups.append(category)
                    where.append((t, w))
                elif not word.text.isspace():
                    passed[category] += 1
        engine = word_engine(ctx, "pos")
        released, count = engine.privatize_words(words, groups, eta=eta, rng=rng)
        out = [[word.text for word in sentence] for sentence in tagged]
        finite = not math.isinf(eta)
        for (t, w), new, original, category in zip(where, released, words, groups):
            out[t][w] = new
            # Released tokens are normalised vocabulary words; at eta = inf the word itself comes back.
            count.count_category(category, perturbed=1, replaced=new not in (original, normalize_word(original)),
                                 forced=finite and not engine.holds(category, original))
        for category, n in passed.items():
            count.count_category(category, passed=n)
        count.passed += sum(passed.values())
        return tagged, out, count

    def privatize(self, texts: Sequence[str], *, eta: float, rng: np.random.Generator,
                  ctx: RunContext) -> tuple[list[str], ReplacementCount]:
        """Tag, perturb the selected words within their category, and rebuild each text."""
        tagged, released, count = self.privatize_words(texts, eta=eta, rng=rng, ctx=ctx)
        out = ["".join(new + word.whitespace for word, new in zip(sentence, words))
               for sentence, words in zip(tagged, released)]
        return out, count

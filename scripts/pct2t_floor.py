"""Why PCT2T replaced words at every η (issue #28): which selected words no candidate of their category equals.

Usage: RAPT_AUDIT_DATA=../shared/data python scripts/pct2t_floor.py [--dataset sst2] [--records 2000]

Tags the dataset's first ``--records`` texts as PCT2T does and sorts each word of RAPT's default
categories (noun, verb, pronoun, preposition) by whether its category's candidates hold it, under three
lexicons: the vocabulary's whole words tagged in isolation only (the first lexicon); those words also in
every category public text tags them with (the second); and the lexicon PCT2T uses now, which adds the
words the vocabulary holds only as sub-word pieces that public text or spaCy's string table provide
(:func:`rapt_audit.mechanisms.pos.vocabulary_lexicon`). A word that no candidate equals is replaced at
every finite η: that share is the floor under the replacement curve. The dataset is only read to
measure; no lexicon is built from it.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter

from rapt_audit.data import load_dataset
from rapt_audit.encoder.vocab import embedding_space
from rapt_audit.mechanisms.analyses import pos_tags
from rapt_audit.mechanisms.engines import lexicon_words, pos_candidates, tagger
from rapt_audit.mechanisms.pos import DEFAULT_CATEGORIES, category_of, vocabulary_lexicon
from rapt_audit.mechanisms.privatize import normalize_word
from rapt_audit.pipeline.context import RunContext, default_cache_dir


def shares(tagged, lexicon: dict[str, set[str]], whole_words: set[str]) -> dict[str, dict[str, float]]:
    """Category (and ``all``) → share of its selected words held by the category, a vocabulary word it
    lacks, or a word the vocabulary holds only as sub-word pieces (and the category lacks)."""
    counts: dict[str, Counter[str]] = {"all": Counter()}
    for sentence in tagged:
        for word in sentence:
            category = category_of(word.upos)
            if category not in DEFAULT_CATEGORIES:
                continue
            text = normalize_word(word.text)
            kind = ("held" if text in lexicon[category] else
                    "vocabulary word, other category" if text in whole_words else "sub-word pieces only")
            for key in ("all", category):
                counts.setdefault(key, Counter())[kind] += 1
    return {key: {"words": sum(c.values()), **{k: round(v / sum(c.values()), 4) for k, v in sorted(c.items())}}
            for key, c in counts.items()}


def main() -> None:
    """Print the three lexicons' shares as JSON, with the most frequent words the current one lacks."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="sst2")
    parser.add_argument("--records", type=int, default=2000)
    args = parser.parse_args()
    ctx = RunContext(seed=0, profile="cpu", device="cpu", cache_dir=default_cache_dir())
    texts = [r.text for r in load_dataset(args.dataset, ctx.data_dir).records[:args.records]]
    tagged = pos_tags(ctx, texts)
    space = embedding_space(ctx)
    words = lexicon_words(space)
    isolation = {c: set(w) for c, w in vocabulary_lexicon(lambda: tagger(ctx), words).items()}
    whole_words = {c: set(w) for c, w in vocabulary_lexicon(lambda: tagger(ctx), words,
                                                           public_text=lambda: ctx.public_text()[1]).items()}
    candidates = pos_candidates(ctx)
    current = {c: {candidates.words[r] for r in rows.tolist()} for c, rows in candidates.groups.items()}
    lacking = Counter(normalize_word(w.text) for sentence in tagged for w in sentence
                      if category_of(w.upos) in DEFAULT_CATEGORIES
                      and normalize_word(w.text) not in current[category_of(w.upos)])
    print(json.dumps({"dataset": args.dataset, "texts": len(texts), "public_text": ctx.public_text()[0],
                      "isolation_only": shares(tagged, isolation, set(words)),
                      "isolation_and_public_text": shares(tagged, whole_words, set(words)),
                      "with_words_held_as_pieces": shares(tagged, current, set(words)),
                      "most_frequent_lacking": lacking.most_common(40)}, indent=1))


if __name__ == "__main__":
    main()

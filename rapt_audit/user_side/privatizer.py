"""The user's side: privatize one's own texts with any defense, streaming, and say what was done.

An audit tells the user which defense and which η leave how much private information exposed;
:class:`Privatizer` is what they then run on their own device. It privatizes through the very
method the audit attacked (a text defense's ``privatize_records``, any other defense's
``release``), so what a user deploys is what was measured.

Records are privatized in batches (256 texts, or about 20,000 characters, whichever comes
first); each batch draws its noise from a generator keyed by the run seed and the records'
positions, so the same input, seed and batch settings give the same output on every machine.
A text longer than ``max_segment`` (5,000) characters is cut at whitespace into segments that are
privatized as separate texts and joined by one space (the embedding defenses concatenate their
token vectors): a 10 MB line streams like many short ones. (The cut only changes the POS tags of
the few words beside it: spaCy's tagger looks four tokens to each side. RAPT prepends its plain
tokens to each segment.) Defenses that release one vector per
text (DPNR, SnD's server output, CAPE) are not segmented; the encoder reads at most its maximum
length of tokens of a text anyway.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Iterator, Mapping, Sequence

from rapt_audit.api.errors import DataError, UsageError
from rapt_audit.api.params import get_params, make_plugin, to_jsonable
from rapt_audit.api.parsing import check_seed
from rapt_audit.api.plugins import DEFENSES, load
from rapt_audit.api.types import Record
from rapt_audit.api.version import __version__
from rapt_audit.encoder.models import model_fingerprint, resolve_device
from rapt_audit.mechanisms.calibration import ReplacementCount
from rapt_audit.mechanisms.privatize import check_text
from rapt_audit.mechanisms.verbatim import sensitive_strings
from rapt_audit.pipeline.context import RunContext, default_cache_dir

#: What the user's device sends, by preference: the text itself, else token vectors, else one vector.
USER_KINDS = ("texts", "token_embeddings", "sequence_embeddings")

#: Longest text whose token vectors are released, in characters (about 20,000 tokens). Each token
#: becomes 384 numbers on the text's one output line, so a 100,000-word text would be a line of
#: hundreds of megabytes that has to be held whole; such a text is refused with the way out instead.
MAX_VECTOR_TEXT_CHARS = 100_000

#: Queries each nearest-neighbour index answers with numpy's exact float64 search before it loads
#: torch (about 1 ms each on one core, against 1–1.5 s to import torch): a text of up to a few hundred
#: tokens is privatized without torch, and the outputs are the same either way.
COLD_QUERIES = 512


def segments_of(text: str, max_segment: int) -> list[str]:
    """``text`` cut at whitespace into pieces of at most ``max_segment`` characters (a longer word is cut)."""
    if len(text) <= max_segment:
        return [text]
    pieces, start = [], 0
    while start < len(text):
        stop = min(len(text), start + max_segment)
        if stop < len(text):
            space = max(text.rfind(" ", start, stop), text.rfind("\n", start, stop), text.rfind("\t", start, stop))
            stop = space if space > start else stop
        pieces.append(text[start:stop])
        start = stop
        while start < len(text) and text[start].isspace():
            start += 1
    return pieces


@dataclass
class Privatizer:
    """A defense set up on the user's device, ready to privatize batch after batch.

    Args:
        defense: A registered defense name (``rapt-audit ls defenses``).
        params: The defense's parameters (``{"eta": 75}``, ``{"replacement": 0.5}``), checked once.
        seed: Seed of every random draw (noise, calibration, RAPT's plain tokens).
        model: ``minilm`` (bundled), a Hugging Face id or a local directory.
        device: ``cpu``, ``cuda`` or ``auto``.
        data_dir: Data directory, for defenses that read public text (calibration with
            ``replacement``, SnD's denoiser).
        max_segment: Longest text privatized in one piece, in characters.
        batch_records: Most texts privatized together.
        batch_chars: Most characters privatized together (the memory bound; see :meth:`privatize`).

    Raises:
        UsageError: for an unknown defense or parameter, or a bad value (the message names it).
    """

    defense: str
    params: Mapping[str, Any] = field(default_factory=dict)
    seed: int = 0
    model: str = "minilm"
    device: str = "cpu"
    data_dir: str | None = None
    max_segment: int = 5_000
    batch_records: int = 256
    batch_chars: int = 20_000
    count: ReplacementCount = field(default_factory=ReplacementCount, init=False)
    records: int = field(default=0, init=False)
    segments: int = field(default=0, init=False)
    sensitive: dict[str, dict[str, Any]] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.seed = check_seed(self.seed)  # before any work: -1 would fail deep in numpy
        load()
        self.plugin = make_plugin(DEFENSES, self.defense, dict(self.params))
        kinds = [k for k in USER_KINDS if k in self.plugin.exposes]
        self.kind = kinds[0]
        self.ctx = RunContext(seed=self.seed, profile="cpu", device=resolve_device(self.device), model=self.model,
                              cache_dir=default_cache_dir(), data_dir=self.data_dir, cold_queries=COLD_QUERIES)
        self._started = time.perf_counter()
        self.in_force = self._privacy_in_force()

    def _privacy_in_force(self) -> dict[str, Any]:
        """η and ε as the releases use them: the defense's ``privacy_level`` (the η or ε calibrated for a
        ``replacement`` target, or the one given), under the name of its ``privacy_parameter`` (η unless it
        says ε); the other, or both for a defense without a level, as declared (None: it has none)."""
        found = {name: getattr(self.plugin, name, None) for name in ("eta", "epsilon")}
        level = getattr(self.plugin, "privacy_level", None)
        level = level(self.ctx) if callable(level) else None
        if level is not None:
            found[getattr(self.plugin, "privacy_parameter", "eta")] = level
        return found

    def privatize(self, texts: Sequence[str]) -> list[Any]:
        """The privatized form of each text: a string, or a list of vectors (lists of floats).

        Long texts are cut into segments (see the module docstring) and the segments go through the
        defense in groups of at most ``batch_chars`` characters, so memory is bounded by the group,
        not by the longest text (spaCy's tagger alone takes about 15 kB per word of a text it reads).

        Raises:
            DataError: for a text that is not a ``str``, holds a lone surrogate, or is too long for a
                token-vector release (:data:`MAX_VECTOR_TEXT_CHARS`) (named by its
                position in the input), before any of the batch is privatized.
        """
        for i, text in enumerate(texts):
            check_text(text, name=f"text {self.records + i}")
            if self.kind == "token_embeddings" and len(text) > MAX_VECTOR_TEXT_CHARS:
                raise DataError(
                    f"text {self.records + i} has {len(text):,} characters; {self.defense} releases one vector of "
                    f"numbers per token, which for this text is one output line of hundreds of megabytes. Split it "
                    f"into lines of at most {MAX_VECTOR_TEXT_CHARS:,} characters (e.g. one paragraph per line)")
        parts: list[list[Any]] = [[] for _ in texts]
        group: list[tuple[int, str]] = []
        size = 0

        def flush() -> None:
            for (i, _), value in zip(group, self._release([piece for _, piece in group])):
                parts[i].append(value)
            group.clear()

        for i, text in enumerate(texts):
            pieces = [text] if self.kind == "sequence_embeddings" else segments_of(text, self.max_segment)
            for piece in pieces:
                if group and size + len(piece) > self.batch_chars:
                    flush()
                    size = 0
                group.append((i, piece))
                size += len(piece)
        if group:
            flush()
        self.records += len(texts)
        return [self._joined(p) for p in parts]

    def _joined(self, parts: list[Any]) -> Any:
        """One text's output from its segments' outputs: texts joined by a space, vectors concatenated."""
        if self.kind == "sequence_embeddings" or len(parts) == 1:
            return parts[0]
        if self.kind == "texts":
            return " ".join(p for p in parts if p)
        return [vector for part in parts for vector in part]

    def _release(self, texts: list[str]) -> list[Any]:
        records = [Record(uid=f"privatize/{self.segments + i}", text=t) for i, t in enumerate(texts)]
        self.segments += len(texts)
        if not records:
            return []
        if hasattr(self.plugin, "privatize_records"):  # text defenses: the text plus what was replaced
            out, count = self.plugin.privatize_records(records, self.ctx)
            self.count.add(count)
            return self._sensitive(texts, list(out))
        try:
            release = self.plugin.release(records, ctx=self.ctx)
        except UsageError as exc:
            raise UsageError(f"{self.defense} cannot privatize on the user's side alone: {exc}. Its client "
                             "part is trained by the service; privatize supports defenses whose release needs "
                             "no training (identity, t2t, pct2t, rapt, embedding, dpnr, snd)") from None
        if self.kind == "texts":  # a text defense without a replacement count (identity)
            self.count.passed += sum(len(t.split()) for t in release.texts)
            return self._sensitive(texts, list(release.texts))
        self.count.perturbed += sum(len(v) for v in release.token_embeddings or ()) or len(records)
        if self.kind == "token_embeddings":
            return [v.astype("float64").round(6).tolist() for v in release.token_embeddings]
        return [list(v) for v in release.sequence_embeddings.astype("float64").round(6).tolist()]

    def _sensitive(self, texts: list[str], out: list[str]) -> list[str]:
        """``out``, after adding its sensitive strings present verbatim to the sidecar's counts.

        Named entities are not counted here, only in an audit's release: spaCy's NER reads about
        10,000 words/s on one core, slower than PCT2T itself.
        """
        self.sensitive = sensitive_strings(texts, out, into=self.sensitive)
        return out

    def stream(self, texts: Iterable[str]) -> Iterator[Any]:
        """Privatized outputs of ``texts`` in order, privatized in batches of bounded size."""
        batch: list[str] = []
        size = 0
        for text in texts:
            batch.append(text)
            size += len(text)
            if len(batch) >= self.batch_records or size >= self.batch_chars:
                yield from self.privatize(batch)
                batch, size = [], 0
        if batch:
            yield from self.privatize(batch)

    def summary(self, **extra: Any) -> dict[str, Any]:
        """The sidecar record: mechanism, parameters, η and ε in force, seed, model fingerprint and the counts."""
        count = self.count
        observed = count.rate if count.perturbed and self.kind == "texts" else None
        # Every unit released as it was, whatever the reason (not privatized, the noise drew the same word,
        # eta = inf): what a reader of the output sees in the clear.
        clear = count.passed + count.perturbed - count.replaced if self.kind == "texts" else None
        return {
            "tool": f"rapt-audit privatize {__version__}", "defense": self.defense,
            "params": get_params(self.plugin), "release_kind": self.kind,
            **{name: to_jsonable(None if value is None else float(value)) for name, value in self.in_force.items()},
            "seed": self.seed, "model": self.model,
            "model_fingerprint": model_fingerprint(self.model, cache_dir=self.ctx.cache_dir),
            "records": self.records, "segments": self.segments, "units": asdict(count), "sent_in_the_clear": clear,
            "sensitive_strings_verbatim": self.sensitive,
            "observed_replacement": observed, "seconds": round(time.perf_counter() - self._started, 3), **extra}


def privatize(texts: Sequence[str] | str, defense: str = "pct2t", *, seed: int = 0, model: str = "minilm",
              device: str = "cpu", data_dir: str | None = None, **params: Any) -> tuple[list[Any], dict[str, Any]]:
    """Privatize ``texts`` on the user's side with ``defense``; return the outputs and the sidecar record.

    Example::

        >>> outputs, record = rapt_audit.privatize(["my rent is due"], "t2t", eta=75, seed=1)  # doctest: +SKIP

    Args:
        texts: The texts (a single string is one text).
        defense: A registered defense (``rapt-audit ls defenses``).
        seed: Seed of every random draw.
        model: ``minilm`` (bundled), a Hugging Face id or a local directory.
        device: ``cpu``, ``cuda`` or ``auto``.
        data_dir: Data directory for defenses that read public text.
        **params: The defense's parameters (``eta=75``, ``replacement=0.5``, ``categories="noun,verb"``).
    """
    privatizer = Privatizer(defense, params, seed=seed, model=model, device=device, data_dir=data_dir)
    outputs = list(privatizer.stream([texts] if isinstance(texts, str) else texts))
    return outputs, privatizer.summary()

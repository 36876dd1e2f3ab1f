"""What a defense can do, declared as data on its class: read by the core instead of the defense's name.

A defense class sets ``capabilities: ClassVar[Capabilities] = Capabilities(...)``: the audit protocol that samples
its mechanism (``rapt-audit audit``), whether it is the no-privacy reference (the ceiling of every table), whether
its service is its own (the benchmark's no-privacy check then expects another ceiling), whether it is a local-only
baseline (it releases nothing) and its fixed place in the figures' colours. A subclass inherits its base's
declaration; one whose mechanism differs declares its own. A class that declares nothing has the defaults, those
of any third-party defense: not the reference, the benchmark's service, audited by whichever protocol its object
supports (:data:`DETECTED`, checked by ``rapt_audit.audit``), a figure place hashed from its name.

The core reads them through :func:`rapt_audit.api.plugins.capabilities_of` and
:func:`rapt_audit.api.plugins.reference_defense`, never by a built-in's name.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

#: ``rapt-audit audit``'s protocols, and what each runs of the defense as a black box (``rapt_audit.audit.protocols``
#: implements each one; the claim is the defense's privacy parameter times the pair's distance).
DCHI_VOCABULARY = "dchi-vocabulary"
DCHI_POS = "dchi-pos"
DCHI_TEXT = "dchi-text"
WORD_MECHANISM = "word-mechanism"
TOKEN_VECTORS = "token-vectors"
CLIENT_UPLOAD = "client-upload"
LAPLACE_REPRESENTATION = "laplace-representation"
AUDIT_PROTOCOLS = {
    DCHI_VOCABULARY: "the nearest-vocabulary dχ engine at the defense's eta: one token (unit=token) or one whole word "
                     "(unit=word)",
    DCHI_POS: "the per-category dχ word engine at the defense's eta, a word against words of its own POS category "
              "(its categories)",
    DCHI_TEXT: "the defense's own privatize(texts, *, eta, rng, ctx) on one-token words, each release read back as a "
               "vocabulary token",
    WORD_MECHANISM: "the defense's own release_words(words, *, epsilon, rng, ctx), within its audit_groups and by its "
                    "audit_distance",
    TOKEN_VECTORS: "the defense's own released_vectors(texts, *, rng, ctx) at eta: the noisy vector of one token",
    CLIENT_UPLOAD: "the defense's own upload(vectors, *, rng, ctx) at eta: the client's noisy upload of one token",
    LAPLACE_REPRESENTATION: "the defense's own laplace_release(rows, uids, *, ctx): Laplace noise on normalised "
                            "vectors, claim epsilon/sensitivity · L1",
}
#: The protocols a defense that declares none is audited by when its object has what they call, tried in this order
#: (the others audit a built-in engine, not the defense's own code, so only a declaration selects them).
DETECTED = (WORD_MECHANISM, LAPLACE_REPRESENTATION, CLIENT_UPLOAD, TOKEN_VECTORS, DCHI_TEXT)


@dataclass(frozen=True)
class Capabilities:
    """What a defense declares it can do; set it as the defense class's ``capabilities``.

    Attributes:
        audit: The protocol ``rapt-audit audit`` samples its mechanism with, one of :data:`AUDIT_PROTOCOLS`;
            ``None``: the first of :data:`DETECTED` its object supports, else it states no guarantee to audit.
        reference: The no-privacy reference: the ceiling every table's targets are shares of, shown for reference
            and never named best, and the default defense of a run. Exactly one registered defense has it.
        own_service: Why its service differs from the benchmark's ``[service]`` (one sentence), so that its
            no-privacy setting has a ceiling of its own; empty: the benchmark's service.
        local_only: A local-only baseline: the client keeps its text and sends nothing (``exposes`` is empty); a
            utility reference, never a candidate.
        figure_place: A built-in's fixed place among the figures' 56 colour and marker pairs (0-23), the same in
            every report whatever is added; ``None`` (plugins): a place hashed from its name among the last 32.
    """

    audit: str | None = None
    reference: bool = False
    own_service: str = ""
    local_only: bool = False
    figure_place: int | None = None

    def __post_init__(self) -> None:
        if self.audit is not None and self.audit not in AUDIT_PROTOCOLS:
            raise ValueError(f"Capabilities.audit is {self.audit!r}; known protocols: {', '.join(AUDIT_PROTOCOLS)} "
                             "(None: the one the defense's object supports)")
        if not isinstance(self.reference, bool) or not isinstance(self.local_only, bool):
            raise TypeError("Capabilities.reference and Capabilities.local_only must be bools")
        if not isinstance(self.own_service, str):
            raise TypeError(f"Capabilities.own_service must be a sentence (str), got {self.own_service!r}")
        if self.reference and self.local_only:
            raise ValueError("a defense cannot be both the no-privacy reference (it sends the text as it is) and a "
                             "local-only baseline (it sends nothing)")
        place = self.figure_place
        if place is not None and (isinstance(place, bool) or not isinstance(place, int) or not 0 <= place < 24):
            raise ValueError(f"Capabilities.figure_place must be a whole number from 0 to 23 or None, got {place!r}")


#: What a defense that declares nothing has.
DEFAULT = Capabilities()


def declared_capabilities(obj: Any) -> Capabilities:
    """The ``capabilities`` a defense (class or instance) declares, or :data:`DEFAULT` when it declares none.

    A subclass inherits its base's capabilities except what names one defense alone: being the no-privacy reference
    and a built-in's figure place. A plugin that subclasses identity (to reuse its plumbing) is another defense, not a
    second reference, and one that subclasses T2T does not take T2T's colour; it declares them itself if it must."""
    found = getattr(obj, "capabilities", None)
    if not isinstance(found, Capabilities):
        return DEFAULT
    cls = obj if isinstance(obj, type) else type(obj)
    if "capabilities" not in vars(cls) and (found.reference or found.figure_place is not None):
        return replace(found, reference=False, figure_place=None)
    return found


def capabilities_problem(obj: Any) -> str | None:
    """Why ``obj``'s ``capabilities`` attribute is unusable (not a :class:`Capabilities`), or ``None``."""
    found = getattr(obj, "capabilities", None)
    if found is None or isinstance(found, Capabilities):
        return None
    return (f"capabilities must be a rapt_audit Capabilities (its audit protocol, whether it is the reference or has "
            f"its own service), got {type(found).__name__} {found!r}")


__all__ = ["AUDIT_PROTOCOLS", "CLIENT_UPLOAD", "Capabilities", "DCHI_POS", "DCHI_TEXT", "DCHI_VOCABULARY", "DEFAULT",
           "DETECTED", "LAPLACE_REPRESENTATION", "TOKEN_VECTORS", "WORD_MECHANISM", "capabilities_problem",
           "declared_capabilities"]

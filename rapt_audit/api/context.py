"""What a plugin receives as ``ctx``: the :class:`RunContext` protocol (seeds, device, model, caches).

Every ``fit``, ``utility``, ``release`` and ``attack`` call gets the run's context as ``ctx``. This
module states what a plugin, and every layer below the pipeline, may ask of it, and nothing more;
the pipeline's concrete class (:class:`rapt_audit.pipeline.context.RunContext`) satisfies it. Layers
that only *receive* a context (mechanisms, encoder, utility, data, the plugins) annotate with this
protocol, so none of them imports the pipeline, even for a type hint.

Two rules follow from it: all randomness comes from :meth:`RunContext.rng` / :meth:`RunContext.seed_for`
(never global state), so a fixed seed gives the same numbers on every machine; and expensive objects
go through :meth:`RunContext.shared`, so a model is loaded once per run however many plugins use it.

May import: the standard library only (numpy is named in type hints alone).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence, TypeVar, runtime_checkable

if TYPE_CHECKING:  # pragma: no cover - a type name only: importing numpy here would slow `rapt-audit --help`
    import numpy as np

T = TypeVar("T")


@runtime_checkable
class Encoder(Protocol):
    """The run's public encoder, as :meth:`RunContext.encoder` returns it (read-only: copy it to train it)."""

    @property
    def spec(self) -> str:
        """What the user asked for: ``"minilm"``, a Hugging Face id or a local path."""

    @property
    def path(self) -> str:
        """The directory (or id) the weights were loaded from."""

    @property
    def tokenizer(self) -> Any:
        """The Hugging Face tokenizer of the model."""

    @property
    def model(self) -> Any:
        """The Hugging Face encoder (``AutoModel``), in eval mode on the run's device."""

    @property
    def device(self) -> str:
        """``"cpu"`` or ``"cuda"``."""

    @property
    def fingerprint(self) -> str:
        """sha256 of the weight file(s): put it in any cache key that depends on the weights."""


@runtime_checkable
class TextReleases(Protocol):
    """An audit's on-disk store of privatized texts (:attr:`RunContext.text_releases`)."""

    def privatized(self, defense: Any, *, mechanism: Mapping[str, Any], eta: float | None,
                   records: Sequence[Any], compute: Callable[[], tuple[list[str], Any]]) -> tuple[list[str], Any]:
        """The stored privatization of ``records`` by ``defense``, or ``compute()`` (then stored).

        ``mechanism`` holds the parameters that shape the released texts, ``eta`` the privacy level in
        force (``None`` for a mechanism without one); both enter the key, with the run's seed and model.
        """


@runtime_checkable
class RunContext(Protocol):
    """Everything a plugin may ask of the run it is part of (one context per run).

    Attributes are read-only for plugins. The methods derive seeds and generators from the run seed
    and share expensive objects across the run's plugins.
    """

    @property
    def seed(self) -> int:
        """The run seed; every random choice is derived from it (use :meth:`rng`, not the seed itself)."""

    @property
    def profile(self) -> str:
        """``smoke`` (seconds, for tests), ``cpu`` (minutes on a laptop) or ``paper`` (the papers' settings);
        a plugin's ``profiles`` class attribute maps each to parameter overrides."""

    @property
    def device(self) -> str:
        """The resolved torch device, ``"cpu"`` or ``"cuda"``."""

    @property
    def precision(self) -> str:
        """``"fp32"`` or ``"bf16"``: the precision networks train and run in (pass it to
        :func:`rapt_audit.utility.on_device.autocast`); mechanisms never read it."""

    @property
    def model(self) -> str:
        """The client's public model's spec (``"minilm"``, a Hugging Face id or a local path): the mechanism's
        embedding table, the local-only clients, the attacker's public model."""

    @property
    def service_model(self) -> str | None:
        """The service's model spec when the run names another model than the client's (``None``: the client's)."""

    @property
    def service_spec(self) -> str:
        """The spec of the model the service runs: ``service_model``, else ``model``."""

    @property
    def cache_dir(self) -> Path:
        """Where expensive intermediate results are cached on disk (``$RAPT_AUDIT_CACHE``)."""

    @property
    def progress(self) -> bool:
        """Whether to show progress bars."""

    @property
    def data_dir(self) -> str | None:
        """The configured data directory (``None``: ``$RAPT_AUDIT_DATA`` or none); pass it to the data loaders."""

    @property
    def cold_queries(self) -> int:
        """Queries a nearest-neighbour index answers with numpy before it loads torch (0 in an audit)."""

    @property
    def cache_analyses(self) -> bool:
        """Whether spaCy's analyses of clean texts may be stored on disk for later runs (an audit's choice)."""

    @property
    def text_releases(self) -> TextReleases | None:
        """Where text defenses store the texts they privatize for later runs; ``None``: privatize afresh."""

    def tally(self, kind: str, event: str) -> None:
        """Count one ``hit`` or ``miss`` of the on-disk cache ``kind`` (recorded in ``env.release_cache``)."""

    def seed_for(self, *key: object) -> int:
        """A stable seed for the component named by ``key`` (e.g. ``("attack", "my_attack")``)."""

    def rng(self, *key: object) -> np.random.Generator:
        """A fresh numpy Generator for the component named by ``key``: the same key gives the same stream."""

    def shared(self, key: tuple[Any, ...], factory: Callable[[], T]) -> T:
        """Build ``factory()`` once per run under ``key`` and return the same object afterwards."""

    def public_text(self) -> tuple[str, list[str]]:
        """The name and texts of a public corpus (never the victim's data), read once per run."""

    def tokenizer(self) -> Any:
        """The public model's tokenizer (without loading the encoder where the model ships ``tokenizer.json``)."""

    def encoder(self) -> Encoder:
        """The client's public encoder, loaded once (offline) and shared; treat it as read-only."""

    def service(self) -> Encoder:
        """The service's pretrained model, which it customizes and scores (the client's encoder when the run
        names no other); loaded once and shared; treat it as read-only."""

    def as_service(self) -> RunContext:
        """The run seen from the service's input space: the same run with the service's model as ``model``
        (where a release of token vectors lives); itself when the service's model is the client's."""


__all__ = ["Encoder", "RunContext", "TextReleases"]

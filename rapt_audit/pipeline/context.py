"""The run context handed to every plugin: seeds, device, model, profile and shared caches.

:class:`RunContext` here is the concrete class the pipeline builds; plugins and the layers below the
pipeline name the protocol it satisfies, :class:`rapt_audit.api.context.RunContext`, which says what
each member gives (``tests/test_architecture.py`` checks that this class has every member of it).
One :class:`RunContext` lives for one run. Plugins draw their randomness from
:meth:`RunContext.rng` (never from global state) and share expensive objects, such as the loaded
encoder or an embedding table, through :meth:`RunContext.shared`, so that a model is loaded once
per run however many defenses and attacks use it.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from rapt_audit.api.files import default_cache_dir
from rapt_audit.api.parsing import check_seed
from rapt_audit.encoder.models import load_model, load_tokenizer

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from rapt_audit.api.context import TextReleases
    from rapt_audit.encoder.models import LoadedModel

T = TypeVar("T")

#: Profiles trade fidelity for cost: ``smoke`` (seconds, for tests), ``cpu`` (minutes on a laptop) and
#: ``paper`` (the papers' settings on full datasets, for a GPU); see ``RunConfig.profile``.
PROFILES = ("smoke", "cpu", "paper")


def derive_seed(seed: int, *key: object) -> int:
    """A stable 63-bit seed for ``key`` derived from the run seed.

    Uses crc32 of the key's text (not Python's salted ``hash``), so derived seeds are the same in
    every process and on every machine.
    """
    import numpy as np  # lazy (numpy)

    spawn_key = tuple(zlib.crc32(str(part).encode("utf-8")) for part in key)
    state = np.random.SeedSequence(entropy=seed, spawn_key=spawn_key).generate_state(2, dtype=np.uint32)
    return int((int(state[0]) << 31) ^ int(state[1]))


@dataclass
class RunContext:
    """Everything a plugin may ask of its run: the concrete :class:`rapt_audit.api.context.RunContext`.

    Attributes:
        seed: The run seed; every random choice is derived from it.
        profile: ``smoke``, ``cpu`` or ``paper``.
        device: The resolved torch device, ``"cpu"`` or ``"cuda"``.
        precision: The resolved precision of the networks the run trains and runs, ``"fp32"`` or
            ``"bf16"`` (:func:`rapt_audit.encoder.precision.resolve_precision`); plugins pass it to
            :func:`rapt_audit.utility.on_device.autocast`. Mechanisms never read it.
        model: The client's model spec (``"minilm"``, a Hugging Face id, or a local path): the mechanism's
            embedding table, the local-only clients and the attacker's public model (ARCHITECTURE.md, "Roles").
        service_model: The service's model spec when it is another model than the client's (``None``: the
            client's, as before issue #63): the model the service customizes and scores (:meth:`service`);
            a release of token vectors lives in its input space (:meth:`as_service`).
        cache_dir: Where expensive intermediate results are cached on disk.
        progress: Whether to show progress bars.
        data_dir: The configured data directory (``None``: ``$RAPT_AUDIT_DATA`` or none).
        cold_queries: Queries each nearest-neighbour index answers with numpy before it loads torch
            (:class:`~rapt_audit.mechanisms.nn_search.NearestNeighbourIndex`); 0 in an audit, where
            torch is loaded anyway, more on the user's side (:class:`~rapt_audit.user_side.privatizer.Privatizer`).
        cache_analyses: Whether spaCy's analyses of clean texts are stored on disk for later runs
            (:mod:`rapt_audit.mechanisms.analyses`): an audit's choice; never on the user's side.
        text_releases: Where text defenses store the texts they privatize, for later runs
            (:mod:`rapt_audit.pipeline.text_store`); None privatizes afresh and stores nothing. Set by
            an audit with its release cache on; never on the user's side.
    """

    seed: int = 0
    profile: str = "smoke"
    device: str = "cpu"
    precision: str = "fp32"
    model: str = "minilm"
    service_model: str | None = None
    cache_dir: Path = field(default_factory=lambda: Path.home() / ".cache" / "rapt-audit")
    progress: bool = False
    data_dir: str | None = None
    cold_queries: int = 0
    cache_analyses: bool = False
    text_releases: TextReleases | None = None
    _memo: dict[tuple[Any, ...], Any] = field(default_factory=dict, repr=False)
    _tallies: dict[str, dict[str, int]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.seed = check_seed(self.seed)  # a run, privatize, calibrate, audit: -1 would fail deep in numpy

    def tally(self, kind: str, event: str) -> None:
        """Count one ``event`` (``hit``, ``miss``: the release cache's words) of the on-disk cache ``kind``
        (``services``...); the run records the counts in ``env.release_cache``."""
        counts = self._tallies.setdefault(kind, {"hit": 0, "miss": 0})
        counts[event] = counts.get(event, 0) + 1

    def tallies(self) -> dict[str, dict[str, int]]:
        """What :meth:`tally` counted, by cache kind."""
        return {kind: dict(counts) for kind, counts in self._tallies.items()}

    def seed_for(self, *key: object) -> int:
        """A seed for the component named by ``key`` (e.g. ``("attack", "mlp_inversion")``)."""
        return derive_seed(self.seed, *key)

    def rng(self, *key: object) -> np.random.Generator:
        """A fresh numpy Generator for the component named by ``key``."""
        import numpy as np  # lazy (numpy)

        return np.random.default_rng(self.seed_for(*key))

    def shared(self, key: tuple[Any, ...], factory: Callable[[], T]) -> T:
        """Build ``factory()`` once per run under ``key`` and return the same object afterwards."""
        if key not in self._memo:
            self._memo[key] = factory()
        return self._memo[key]

    def public_text(self) -> tuple[str, list[str]]:
        """Public text, never the victim's: the name and every text of WikiText-2 in the data directory
        when present, else of the demo corpus (:func:`rapt_audit.data.public.public_dataset`); read once per run."""
        from rapt_audit.data.public import public_dataset  # lazy (numpy, via the data loaders)

        def read() -> tuple[str, list[str]]:
            dataset = public_dataset(self.data_dir)
            return dataset.name, [record.text for record in dataset.records]

        return self.shared(("public_text",), read)

    def tokenizer(self) -> Any:
        """The model's tokenizer, without loading the encoder where the model ships a ``tokenizer.json``.

        When the run has already loaded the encoder, its tokenizer is reused rather than read again.
        """
        loaded = self._memo.get(("encoder", self.model, self.device))
        return self.shared(("tokenizer", self.model),
                           lambda: loaded.tokenizer if loaded is not None else load_tokenizer(self.model))

    def encoder(self) -> LoadedModel:
        """The run's pretrained encoder and tokenizer, loaded once per process (offline) and shared.

        Treat it as read-only: plugins that train an encoder must copy it first.
        """
        return self.shared(("encoder", self.model, self.device), lambda: load_model(self.model, device=self.device))

    @property
    def service_spec(self) -> str:
        """The spec of the model the service runs: :attr:`service_model`, else the client's :attr:`model`."""
        return self.service_model or self.model

    def service(self) -> LoadedModel:
        """The service's pretrained model, which it customizes and scores (the client's encoder itself when the
        run names no other service model); loaded once per process and shared. Treat it as read-only."""
        return self.as_service().encoder()  # one memo: the client's own encoder when the service names no other

    def as_service(self) -> RunContext:
        """This run seen from the service's input space: a context whose :attr:`model` is the service's (its
        embedding table, tokenizer and encoder), sharing this one's caches, counters and seeds.

        A defense that releases token vectors (``embedding``, ``snd``) releases rows of the service's input
        table, as SnD's client holds the LLM's embedding layer; it and the attacks on its release run in this
        context (:func:`rapt_audit.pipeline.runner` picks it by the defense's ``input_space``)."""
        if self.service_model is None or self.service_model == self.model:
            return self
        return replace(self, model=self.service_model, service_model=None, _memo=self._memo, _tallies=self._tallies)


#: default_cache_dir lives in api.files (the encoder layer needs it too); the pipeline's callers import it from here.
__all__ = ["PROFILES", "RunContext", "default_cache_dir", "derive_seed"]

"""What the learned token-inversion attacks (MLP, autoencoder) share: parameters, data, training.

Both attacks are adaptive (Kerckhoffs): the adversary privatizes its own auxiliary records with the
same defense, learns a map from what was released for a token to what the token was, and selects
the epoch on its own validation records — never on the victim's. :class:`LearnedTokenInversion`
holds the parameters this takes and the three steps that do not depend on the network:

* :meth:`~LearnedTokenInversion._attacker_data` — the attacker's train / valid records released
  through the defense, as token views and units (and the content-token unit's prior, fitted on them);
* :meth:`~SelectedTraining._train_selected` — the one training loop
  (:func:`rapt_audit.utility.training.fit`) with early stopping on attacker-valid data, and the
  training parameters ``bow_inversion`` shares;
* :meth:`~LearnedTokenInversion._trained_or_read` — the trained network read back from the disk
  cache when the same released features were trained on before (issue #29: a sweep's re-run, an
  added attack, a warm smoke run), else trained and stored;
* :meth:`~LearnedTokenInversion._victim_views` — the victim release as views, after checking that
  the attack was fitted, that the data are disjoint and that the release is of the trained kind;
* :meth:`~LearnedTokenInversion._content` — the top-1 guesses scored in the content-token unit
  (``content_f1``, ``content_privacy``...), reported beside each attack's own metrics.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from rapt_audit.api.context import RunContext
from rapt_audit.api.digests import array_digest, code_digest
from rapt_audit.api.errors import DataError, UsageError
from rapt_audit.api.params import CheckedParams, NonNegativeFloat, PositiveFloat, PositiveInt, get_params
from rapt_audit.api.types import AttackerData, Estimate, Record, Release, Skip
from rapt_audit.attacks._base import adaptive_release, check_disjoint, require_size
from rapt_audit.attacks._token_views import (
    TokenView,
    Units,
    build_views,
    content_metrics,
    content_prior,
    release_kind,
    units_of,
    views_for,
)
from rapt_audit.encoder.models import model_fingerprint
from rapt_audit.scoring.content_tokens import ContentPrior
from rapt_audit.utility import training
from rapt_audit.utility.on_device import autocast
from rapt_audit.utility.state_cache import cached_state
from rapt_audit.utility.training import EarlyStopping, TrainOutcome, adam, fit, shuffled, supervised_loss


#: The code that builds and trains the inversion networks (cached weights are reused only by it).
CODE_VERSION = code_digest(__file__, training.__file__, *(Path(__file__).with_name(m) for m in (
    "mlp_inversion.py", "ae_inversion.py", "_token_views.py")))


@dataclass
class SelectedTraining(CheckedParams):
    """Training parameters of a learned, adaptive attack whose epoch is chosen on attacker-valid data (a base,
    not a plugin): the token-inversion attacks below and ``bow_inversion``.

    Attributes:
        hidden: Width of the network's hidden layers.
        epochs: Most training epochs (the best one on attacker-valid data is kept).
        batch_size: Examples (tokens, or records) per training step.
        lr: Adam's learning rate.
        weight_decay: Adam's weight decay.
        patience: Epochs without a better attacker-valid score before training stops.
        min_train_records: Fewest attacker-train records the attack accepts.
        min_valid_records: Fewest attacker-valid records the attack accepts.
    """

    hidden: PositiveInt = 512
    epochs: PositiveInt = 20
    batch_size: PositiveInt = 256
    lr: PositiveFloat = 1e-3
    weight_decay: NonNegativeFloat = 0.0
    patience: PositiveInt = 3
    min_train_records: PositiveInt = 20
    min_valid_records: PositiveInt = 5

    def _require_sizes(self, aux: AttackerData) -> None:
        """A :class:`DataError` saying how much data the attack needs when ``aux`` holds too little."""
        require_size(aux.train, self.min_train_records, attack=self.name, what="attacker-train")
        require_size(aux.valid, self.min_valid_records, attack=self.name, what="attacker-valid")

    def _train_selected(self, net: Any, x: np.ndarray, y: np.ndarray, *, criterion: Callable[[Any, Any], Any],
                        valid_score: Callable[[Any], float], seed: int, ctx: RunContext) -> TrainOutcome:
        """Train ``net`` with epoch selection on the attacker's validation data (the one training loop,
        :func:`rapt_audit.utility.training.fit`).

        Adam with ``lr`` and ``weight_decay``, batches of ``batch_size`` in an order seeded by ``seed``
        (initialisation is seeded by the caller), at most ``epochs`` epochs with ``patience``.
        ``valid_score(net)`` is maximised and reads attacker-valid data only (never the victim's
        records). The untrained network (epoch 0) is a candidate too, so a model that never beats its
        initialisation on validation data is reported as such instead of overfitting. Forward passes
        run in the run's precision (``ctx.precision``) on its device.
        """
        return fit(net, loss=supervised_loss(net, x, y, criterion, device=ctx.device),
                   batches=shuffled(len(x), int(self.batch_size), rng=np.random.default_rng(seed)),
                   optimizer=adam(net.parameters(), lr=self.lr, weight_decay=self.weight_decay),
                   stop=EarlyStopping(int(self.epochs), valid_score, patience=int(self.patience), untrained=True),
                   autocast=functools.partial(autocast, ctx.device, ctx.precision))


@dataclass
class LearnedTokenInversion(SelectedTraining):
    """Parameters and shared steps of a learned, adaptive token-inversion attack (a base, not a plugin).

    Attributes:
        context: Append the frozen encoder's contextual state to each token's released vector.

    ``hidden``, ``epochs``, ``batch_size`` (tokens per step), ``lr``, ``weight_decay``, ``patience`` and
    ``min_*_records``: see :class:`SelectedTraining`.
    """

    context: bool = True

    _aux: AttackerData | None = field(default=None, init=False, repr=False)
    _kind: str = field(default="", init=False, repr=False)
    _net: Any = field(default=None, init=False, repr=False)
    _mean: np.ndarray | None = field(default=None, init=False, repr=False)
    _std: np.ndarray | None = field(default=None, init=False, repr=False)
    _fit_details: dict[str, Any] = field(default_factory=dict, init=False, repr=False)
    _content_prior: ContentPrior | None = field(default=None, init=False, repr=False)

    def _attacker_data(self, aux: AttackerData, defense: Any, *, ctx: RunContext
                       ) -> tuple[list[TokenView], list[TokenView], Units, Units]:
        """The attacker's train and valid records released through ``defense``: views, then units.

        Remembers ``aux`` (to check disjointness from the victim later), the release kind and the
        release-ignoring prior of the content-token unit (fitted on ``aux``'s texts).

        Raises:
            Skip: when the defense releases nothing token-level (before any work).
            DataError: when the attacker has too few records, or no aligned regular token to learn from.
        """
        release_kind(frozenset(getattr(defense, "exposes", frozenset())), attack=self.name)
        self._require_sizes(aux)
        train_release = adaptive_release(defense, aux.train, ctx=ctx)
        valid_release = adaptive_release(defense, aux.valid, ctx=ctx)
        self._aux, self._kind = aux, release_kind(train_release.kinds, attack=self.name)
        self._content_prior = content_prior(aux, self._kind)
        train_views = build_views(train_release, aux.train, ctx=ctx, kind=self._kind)
        valid_views = build_views(valid_release, aux.valid, ctx=ctx, kind=self._kind)
        train_units = units_of(train_views)
        if not train_units.aligned.any():
            raise DataError(f"attack {self.name!r}: the attacker's released training data has no aligned regular "
                            "tokens to learn from; raise data.attacker_train")
        return train_views, valid_views, train_units, units_of(valid_views)

    def _standardise_with(self, x: np.ndarray) -> None:
        """Keep ``x``'s per-feature mean and standard deviation (floored at 1e-6) to standardise inputs."""
        self._mean = x.mean(axis=0, keepdims=True)
        self._std = np.maximum(x.std(axis=0, keepdims=True), 1e-6)

    def _trained_or_read(self, train_feats: np.ndarray, train_units: Units, valid_feats: np.ndarray,
                         valid_units: Units, *, train: Callable[[], dict[str, Any]], ctx: RunContext
                         ) -> tuple[dict[str, Any], bool]:
        """Train ``self._net`` (already built, seeded) with ``train``, or load the weights stored for the same inputs.

        The weights depend on the released features of the attacker's train and valid records and their
        aligned targets (which hold the defense, its parameter and the attacker's records), the attack's
        parameters, the public model, the seed, the device, the precision and this code; a run that meets
        the same release again (a re-run, an added attack, a warm smoke run) reads back the very weights
        training wrote, so results do not change. ``train`` returns a JSON-able record of the training
        (epoch scores and the like), which is stored with the weights and returned on a hit.

        Returns:
            The training record and whether the weights came from the cache.
        """
        data = array_digest(train_feats, train_units.target_row, train_units.source,
                            valid_feats, valid_units.target_row, valid_units.source)
        signature = {"attack": self.name, "params": get_params(self), "data": data,
                     "model": model_fingerprint(ctx.model, cache_dir=ctx.cache_dir), "seed": ctx.seed, "device": ctx.device,
                     "precision": ctx.precision, "code": CODE_VERSION}
        net = self._net

        def restore(state: dict[str, Any]) -> Any:
            net.load_state_dict(state)
            net.eval()  # as training leaves it (utility.training.fit ends in eval mode): no dropout when scoring
            return net

        _, record, cached = cached_state(ctx.cache_dir / "attacks", signature, device=ctx.device,
                                         train=lambda: (net, train()), restore=restore)
        return record, cached

    def _content(self, guess_rows: np.ndarray, units: Units, truth: Sequence[Record], *, ctx: RunContext
                 ) -> dict[str, Estimate]:
        """Content-token recovery of the top-1 ``guess_rows`` (``-1``: no guess), reported beside the attack's own
        metrics (:func:`~rapt_audit.attacks._token_views.content_metrics`)."""
        return content_metrics(guess_rows, units, truth, kind=self._kind, prior=self._content_prior,
                               attack=self.name, ctx=ctx)

    def _victim_views(self, release: Release, truth: Sequence[Record], *, ctx: RunContext
                      ) -> tuple[list[TokenView], Units]:
        """Views and units of the victim release.

        Raises:
            UsageError: when :meth:`fit` has not run.
            Skip: when the release is not of the kind the attack was trained on.
        """
        if self._aux is None or self._net is None:
            raise UsageError(f"{self.name}: call fit(aux, defense, ctx=...) before attack")
        check_disjoint(self._aux, truth)
        kind = release_kind(release.kinds, attack=self.name)
        if kind != self._kind:
            raise Skip(f"{self.name} was trained on {self._kind} releases but the victim release holds {kind}")
        _, views = views_for(release, truth, ctx=ctx, attack=self.name, supported=(kind,))
        return views, units_of(views)


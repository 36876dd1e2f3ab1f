"""The service's customization, shared by every defense whose utility customizes the public encoder.

These settings are the service's, not the defense's: they say how the service trains on what the
user sends (and so set the utility measured), never what is released, which no attack therefore
depends on. The text defenses (T2T, PCT2T, RAPT and any plugin on
:class:`~rapt_audit.defenses._text.TextDefense`), ``identity`` (the no-privacy ceiling of each method)
and the token-embedding defense ``embedding`` take the same settings and train the same way:
:class:`Customized` holds them, checks them once, and runs the two steps in the order that keeps the
test split unread until the model is final — :func:`~rapt_audit.utility.customized.customize_service`
(learning rate and epoch chosen on a validation split of the training texts), then
:func:`~rapt_audit.utility.customized.score_customized` on the test texts. ``method=head`` is embedding as a
service (SnD's protocol): the service's frozen model mean-pools what it receives and the local encoder
client's MLP head is trained on those vectors, so identity under it and ``local client=encoder`` with the
service's model train one head on the same vectors.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields
from typing import Annotated, Any, Callable, ClassVar, Literal, Mapping, Sequence

import numpy as np

from rapt_audit.api.context import RunContext
from rapt_audit.api.errors import UsageError
from rapt_audit.api.params import Check, CheckedParams, PositiveInt, get_params
from rapt_audit.api.types import Estimate
from rapt_audit.defenses._representation import HEAD_PROFILES, TaskClassifier
from rapt_audit.encoder.encode import encode_pooled
from rapt_audit.utility.customize import METHODS, PlainTokens, check_method, check_positions, resolve_settings
from rapt_audit.utility.customized import customize_service, score_customized, score_probabilities
from rapt_audit.utility.on_device import Precision
from rapt_audit.utility.probes import bow_probe_utility
from rapt_audit.utility.selection import check_lr_grid, resolve_grid
from rapt_audit.utility.token_vectors import TokenVectors


#: The embedding-as-a-service protocol (SnD's): the service's frozen model embeds what it receives and a head is
#: trained on the vectors; nothing of the model is customized, so it is not one of the customization METHODS.
HEAD = "head"


def check_text_method(method: str) -> str:
    """``bow`` (the quick bag-of-words probe), ``head`` (the service's frozen model and a trained head) or a
    customization method (prompt, prefix, lora, full)."""
    return method if method in ("bow", HEAD) else check_method(method)


def check_optional_lr_grid(values: tuple[float, ...] | None) -> tuple[float, ...] | None:
    """None (the profile's grid) or a grid checked by :func:`~rapt_audit.utility.selection.check_lr_grid`."""
    return None if values is None else check_lr_grid(values)


@dataclass
class Customized(CheckedParams):
    """Parameters and steps of the service's customization (a base class of defenses).

    A parameter group (``parameter_group``): its settings come after the defense's own parameters in
    ``rapt-audit ls --params`` and in a result's ``params``.

    Attributes:
        method: ``bow``, ``head`` (embedding as a service: the service's frozen model mean-pools what it receives
            and the local encoder client's MLP head is trained on those vectors, a fixed number of epochs) or the
            customization method of the service's utility model.
        epochs: Maximum training epochs; the epoch is chosen by early stopping on a validation split
            carved from the (privatized) training texts (None: the profile's).
        lr: Pins the learning rate (None: chosen on the validation split from ``lr_grid``).
        lr_grid: Learning rates to choose from on the validation split (None: the profile's grid,
            :data:`rapt_audit.utility.selection.LR_GRIDS` at ``paper``, the profile's one value otherwise).
        patience: Epochs without a better validation accuracy before training stops (None: the profile's).
        batch_size, max_length, virtual_tokens: Training settings (None: the profile's).
        precision: ``fp32`` or ``bf16`` for the service's customization alone (None: the run's
            ``--precision``, by default bf16 mixed precision where the CPU or GPU computes it natively).
    """

    parameter_group: ClassVar[str] = "the service's customization"

    method: Annotated[str, Check(check_text_method)] = "bow"
    epochs: int | None = None
    lr: float | None = None
    lr_grid: Annotated[tuple[float, ...] | None, Check(check_optional_lr_grid)] = None
    patience: PositiveInt | None = None
    batch_size: int | None = None
    max_length: int | None = None
    virtual_tokens: int | None = None
    precision: Precision | None = None
    _training: dict[str, Any] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.lr is not None and self.lr_grid is not None:  # refused when built: --dry-run says so too
            raise UsageError(f"set either lr (pins one value; here {self.lr:g}) or lr_grid (searched on validation "
                             "data), not both")

    def training_overrides(self) -> dict[str, Any]:
        """The customization settings the user set explicitly (None means the profile default)."""
        return {"epochs": self.epochs, "lr": self.lr, "batch_size": self.batch_size, "max_length": self.max_length,
                "virtual_tokens": self.virtual_tokens, "patience": self.patience, "precision": self.precision}

    def check_customization(self, ctx: RunContext, *, plain: PlainTokens | None = None) -> None:
        """Resolve the settings and the grid and check the input fits the model, before any other work."""
        settings = resolve_settings(self.method, ctx.profile, self.training_overrides())
        resolve_grid(settings.method, ctx.profile, lr=self.lr, lr_grid=self.lr_grid)
        check_positions(settings, len(plain.words) if plain else 0,
                        int(ctx.service().model.config.max_position_embeddings))

    def customization_options(self, ctx: RunContext) -> dict[str, Any]:
        """Extra arguments of the service's training (RAPT adds its plain tokens and reconstruction)."""
        return {}

    def check_service(self, ctx: RunContext) -> None:
        """Check the settings before any other work when the service customizes the encoder (a probe,
        ``bow`` or ``probe``, has nothing to check), so a prompt too long for the model fails in a second."""
        if self.method in METHODS:
            self.check_customization(ctx, plain=self.customization_options(ctx).get("plain"))

    def service_scores(self, train_texts: Sequence[str], y_train: np.ndarray,
                       test: Callable[[], tuple[Sequence[str], np.ndarray]], *, ctx: RunContext, key: str,
                       loaded: Any = None) -> Mapping[str, Estimate]:
        """The service's utility on texts, the one branch every text defense and ``identity`` share: the
        bag-of-words probe (``method="bow"``), or the encoder customized on the training texts with this
        defense's :meth:`customization_options` (:meth:`customized_scores`); ``test()`` gives the test texts
        and labels once training is over."""
        if self.method == "bow":
            test_texts, y_test = test()
            return bow_probe_utility(train_texts, y_train, test_texts, y_test, rng=ctx.rng("utility", key))
        if self.method == HEAD:
            service = ctx.as_service()  # the service's tokenizer, input table and (frozen, maybe adapted) model
            return self.head_scores(encode_pooled(service, train_texts, model=loaded), y_train,
                                    lambda: _pooled_test(service, test, loaded), ctx=ctx, key=key)
        return self.customized_scores(train_texts, y_train, test, ctx=ctx, key=key, loaded=loaded,
                                      **self.customization_options(ctx))

    def head_scores(self, x_train: np.ndarray, y_train: np.ndarray, test: Callable[[], tuple[np.ndarray, np.ndarray]],
                    *, ctx: RunContext, key: str) -> Mapping[str, Estimate]:
        """``method=head``: the local encoder client's MLP head (its settings at this profile, a fixed number of
        epochs: nothing chosen on any split) trained on the service's vectors of the training inputs, then scored
        on ``test()``'s vectors, read only once the head is trained. A class the training labels never showed
        gets probabilities of zero (:func:`~rapt_audit.utility.customized.score_probabilities`)."""
        head = TaskClassifier(**HEAD_PROFILES.get(ctx.profile, {}))
        started = time.perf_counter()
        predict = head.fit_task_classifier(x_train, y_train, n_classes=int(np.max(y_train)) + 1, device=ctx.device,
                                           precision=ctx.precision, seed=ctx.seed_for("customize", key))
        x_test, y_test = test()
        self._training = {"settings": {"method": HEAD, **get_params(head)}, "train_examples": len(x_train),
                          "train_seconds": round(time.perf_counter() - started, 2), "service": ctx.service_spec}
        return score_probabilities(predict(x_test), y_test, ctx=ctx, key=key)

    def customized_scores(self, train_texts: Sequence[str] | TokenVectors, y_train: np.ndarray,
                          test: Callable[[], tuple[Sequence[str] | TokenVectors, np.ndarray]], *, ctx: RunContext,
                          key: str, loaded: Any = None, **options: Any) -> Mapping[str, Estimate]:
        """Customize on the training texts, then score on the test texts, which ``test()`` gives only then.

        ``test`` returns the test texts and labels; it is called after the model is final, so nothing
        of the test split can reach the choice of learning rate or epoch. The training record is kept
        in ``_training`` for the release facts. A token-embedding defense passes its released vectors
        (:class:`~rapt_audit.utility.token_vectors.TokenVectors`) in place of texts.
        """
        trained, self._training = customize_service(
            train_texts, y_train, method=self.method, overrides=self.training_overrides(), ctx=ctx, key=key,
            lr_grid=self.lr_grid, loaded=loaded, **options)
        test_texts, y_test = test()
        return score_customized(trained, test_texts, y_test, ctx=ctx, key=key)


def _pooled_test(service: RunContext, test: Callable[[], tuple[Sequence[str], np.ndarray]],
                 loaded: Any) -> tuple[np.ndarray, np.ndarray]:
    """The test texts' vectors from the service's frozen model, and their labels (read when the head is trained)."""
    texts, y_test = test()
    return encode_pooled(service, texts, model=loaded), y_test


#: The names of the service's customization settings (every defense on :class:`Customized` takes them).
SERVICE_PARAMETERS = frozenset(f.name for f in fields(Customized) if f.init)

__all__ = ["HEAD", "SERVICE_PARAMETERS", "Customized", "check_optional_lr_grid", "check_text_method"]

"""Torch training helpers of the representation defenses: gradient reversal, CAPE's adversarial
training, and the small MLP task classifier shared by CAPE, DPNR and SnD.

This module imports torch at import time; defenses import it inside their methods only, so that
``import rapt_audit`` and ``rapt-audit ls`` stay light.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from rapt_audit.encoder.encode import to_device
from rapt_audit.encoder.models import one_thread
from rapt_audit.utility.on_device import autocast
from rapt_audit.utility.training import DeviceSum, Epochs, adam, fit, shuffled_even, supervised_loss


class _ReverseGradient(torch.autograd.Function):
    """Identity forward; the backward pass multiplies the gradient by ``-weight`` (Ganin & Lempitsky, 2015)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: float) -> torch.Tensor:  # noqa: ANN001
        ctx.weight = weight
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # noqa: ANN001
        return -ctx.weight * grad, None


def reverse_gradient(x: torch.Tensor, weight: float) -> torch.Tensor:
    """``x`` unchanged, but gradients flowing back through it are multiplied by ``-weight``."""
    return _ReverseGradient.apply(x, float(weight))


def _positions(mask: np.ndarray, device: str) -> torch.Tensor | slice:
    """Rows of a batch where the host-side ``mask`` holds: all of them as a slice (no copy), else their positions."""
    return slice(None) if mask.all() else to_device(np.flatnonzero(mask), device)


def mlp(in_dim: int, hidden: int, out_dim: int, dropout: float) -> nn.Sequential:
    """Linear → ReLU → Dropout → Linear (CAPE's heads and the utility classifier)."""
    return nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, out_dim))


def minmax_torch(x: torch.Tensor) -> torch.Tensor:
    """Per-row min-max normalisation to [0, 1] (differentiable; constant rows become 0)."""
    low = x.min(dim=1, keepdim=True).values
    span = x.max(dim=1, keepdim=True).values - low
    return torch.where(span > 0, (x - low) / span.clamp_min(1e-12), torch.zeros_like(x))


def laplace_like(x: torch.Tensor, scale: float, generator: torch.Generator) -> torch.Tensor:
    """Fresh Laplace(0, scale) noise of ``x``'s shape (per example and per dimension); 0 for scale 0."""
    if scale == 0.0:
        return torch.zeros_like(x)
    u = torch.rand(x.shape, generator=generator, device=x.device, dtype=x.dtype) - 0.5
    # Inverse CDF; clamp keeps log1p finite when u hits -0.5 exactly.
    return -scale * torch.sign(u) * torch.log1p(-2.0 * u.abs().clamp(max=0.5 - 1e-7))


@dataclass
class TrainedClassifier:
    """A trained MLP classifier and what it was trained on."""

    model: nn.Module
    n_classes: int
    device: str
    history: list[float] = field(default_factory=list)
    precision: str = "fp32"

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        """Class probabilities ``(n, k)`` for feature rows ``x`` (computed in the training precision)."""
        self.model.eval()
        with torch.no_grad(), one_thread(self.device), autocast(self.device, self.precision):
            logits = self.model(torch.as_tensor(np.asarray(x, dtype=np.float32), device=self.device))
        return torch.softmax(logits.float(), dim=1).cpu().numpy()


def fit_classifier(x: np.ndarray, y: np.ndarray, *, n_classes: int, hidden: int = 256, dropout: float = 0.4,
                   epochs: int = 30, lr: float = 1e-3, batch_size: int = 64, weight_decay: float = 1e-4,
                   seed: int, device: str = "cpu", precision: str = "fp32") -> TrainedClassifier:
    """Train an MLP on standardised-by-the-caller features for a **fixed** number of epochs.

    A fixed epoch count (never chosen on any test split) keeps the utility protocol honest. Forward
    passes run at ``precision`` (:func:`rapt_audit.utility.on_device.autocast`).
    """
    torch.manual_seed(seed)
    order_rng = np.random.default_rng(seed)
    model = mlp(x.shape[1], hidden, n_classes, dropout).to(device)
    optimizer = adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    batch_loss = supervised_loss(model, np.asarray(x, dtype=np.float32), np.asarray(y, dtype=np.int64),
                                 nn.functional.cross_entropy, device=device)
    total = DeviceSum(["loss"], device)  # this epoch's summed loss, read once per epoch

    def loss(idx: np.ndarray) -> torch.Tensor:
        value = batch_loss(idx)
        total.add("loss", value, len(idx))
        return value

    def mean_loss(_epoch: int) -> float:
        return total.read()["loss"] / len(x)

    with one_thread(device):
        outcome = fit(model, loss=loss, batches=shuffled_even(len(x), batch_size, rng=order_rng), optimizer=optimizer,
                      stop=Epochs(epochs), end_epoch=mean_loss, autocast=functools.partial(autocast, device, precision))
    return TrainedClassifier(model, n_classes, device, outcome.history, precision)


@dataclass
class CapeModel:
    """CAPE's trainable parts: the client-side projection, the task head and the adversary head."""

    projection: nn.Linear
    task_head: nn.Module | None
    adversary_head: nn.Module | None
    history: list[dict[str, float]] = field(default_factory=list)

    def project(self, pooled: np.ndarray, device: str) -> np.ndarray:
        """The client-side representation before noise: min-max(projection(pooled)), float64."""
        self.projection.eval()
        with torch.no_grad(), one_thread(device):
            z = minmax_torch(self.projection(torch.as_tensor(np.asarray(pooled, dtype=np.float32), device=device)))
        return z.cpu().numpy().astype(np.float64)


def train_cape(pooled: np.ndarray, labels: np.ndarray, attributes: np.ndarray, *, n_classes: int, n_values: int,
               noise_scale: float, adversary_weight: float, hidden: int, dropout: float, lr: float,
               adversary_lr: float, epochs: int, batch_size: int, seed: int, device: str = "cpu",
               precision: str = "fp32") -> CapeModel:
    """CAPE's adversarial training (Plant et al., EMNLP 2021, Sec. 3) on frozen pooled representations.

    Forward: ``r = minmax(P·pooled)``, ``r̃ = r + Laplace(0, noise_scale)`` fresh at every step, the task
    head reads ``r̃``, the adversary head reads ``reverse_gradient(r̃, λ)``. Minimising task CE +
    adversary CE trains the adversary to find the attribute while the projection P receives
    ``-λ ×`` the adversary's gradient, i.e. is pushed to remove it.

    Args:
        pooled: ``(n, d)`` frozen-encoder outputs.
        labels: ``(n,)`` task labels, ``-1`` where a record has none (no task loss for it).
        attributes: ``(n,)`` private-attribute indices, ``-1`` where unknown (no adversary loss).
        n_classes / n_values: Number of task classes / attribute values (0 disables that head).
        noise_scale: Laplace scale ``sensitivity / epsilon`` (0: no noise).
        adversary_weight: λ of the gradient reversal (0: the adversary is not trained at all).
        precision: Of the heads' forward passes; the projection, its normalisation and the Laplace
            noise are computed in float32 as in the release, whatever the precision.
    """
    d = pooled.shape[1]
    torch.manual_seed(seed)
    generator = torch.Generator(device=device).manual_seed(seed)
    projection = nn.Linear(d, d).to(device)
    with torch.no_grad():  # start at the plain pooled representation
        projection.weight.copy_(torch.eye(d))
        projection.bias.zero_()
    task_head = mlp(d, hidden, n_classes, dropout).to(device) if n_classes >= 2 else None
    adversary_head = mlp(d, hidden, n_values, dropout).to(device) if n_values >= 2 and adversary_weight > 0 else None
    groups = [{"params": projection.parameters(), "lr": lr}]
    groups += [{"params": task_head.parameters(), "lr": lr}] if task_head is not None else []
    groups += [{"params": adversary_head.parameters(), "lr": adversary_lr}] if adversary_head is not None else []
    optimizer = adam(groups)
    labels, attributes = np.asarray(labels, dtype=np.int64), np.asarray(attributes, dtype=np.int64)
    xt = torch.as_tensor(np.asarray(pooled, dtype=np.float32), device=device)
    yt, at = torch.as_tensor(labels, device=device), torch.as_tensor(attributes, device=device)
    model = CapeModel(projection, task_head, adversary_head)
    # Per-epoch sums stay on the device; which rows have a label or an attribute is read from the host
    # arrays, so a step never waits for the device (a boolean mask on a CUDA tensor would).
    sums = DeviceSum(("task_loss", "adversary_loss", "adversary_correct"), device)
    # Every row is visited once an epoch (shuffled_even), so the epoch's counts are the data's.
    n_labelled, n_attributed = max(int((labels >= 0).sum()), 1), max(int((attributes >= 0).sum()), 1)

    def loss(idx: np.ndarray) -> torch.Tensor | None:
        rows = to_device(idx, device)
        with autocast(device, "fp32"):  # the mechanism's part: float32, as the release computes it
            r = minmax_torch(projection(xt[rows]))
            noisy = r + laplace_like(r, noise_scale, generator)
        total = torch.zeros((), device=device)
        has_label, has_attr = labels[idx] >= 0, attributes[idx] >= 0
        if task_head is not None and has_label.any():
            keep = _positions(has_label, device)
            task_loss = nn.functional.cross_entropy(task_head(noisy[keep]), yt[rows][keep])
            total = total + task_loss
            sums.add("task_loss", task_loss, int(has_label.sum()))
        if adversary_head is not None and has_attr.any():
            keep = _positions(has_attr, device)
            logits, attribute = adversary_head(reverse_gradient(noisy[keep], adversary_weight)), at[rows][keep]
            adv_loss = nn.functional.cross_entropy(logits, attribute)
            total = total + adv_loss
            sums.add("adversary_loss", adv_loss, int(has_attr.sum()))
            sums.add("adversary_correct", (logits.argmax(1) == attribute).sum())
        return total if total.requires_grad else None  # a batch with neither label nor attribute: no step

    def epoch_record(_epoch: int) -> dict[str, float]:
        totals = sums.read()
        return {"task_loss": totals["task_loss"] / n_labelled, "adversary_loss": totals["adversary_loss"] / n_attributed,
                "adversary_train_accuracy": totals["adversary_correct"] / n_attributed}

    parts = nn.ModuleList([m for m in (projection, task_head, adversary_head) if m is not None])
    with one_thread(device):
        outcome = fit(parts, loss=loss, batches=shuffled_even(len(xt), batch_size, rng=np.random.default_rng(seed)),
                      optimizer=optimizer, stop=Epochs(epochs), end_epoch=epoch_record,
                      autocast=functools.partial(autocast, device, precision))
    model.history = outcome.history
    return model

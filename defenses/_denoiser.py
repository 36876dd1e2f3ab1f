"""Split-and-Denoise's client-side pieces (Mai et al., ICML 2024, Sec. 3.3-3.4).

* :func:`clip_rows` — Eq. 3: scale each privatized token vector down to norm ``<= C``;
* :func:`privatize_tokens` — dχ noise then clipping, returning the upload and the noise matrix
  ``Z = M'(x) - x`` that the client keeps;
* :class:`Denoiser` — a small transformer over ``[e_n; x̃_1..x̃_n; z_1..z_n]`` whose output at the
  first position is the denoised embedding (Eq. 6-10), next to a linear path over the pooled inputs;
* :func:`train_denoiser` — the server's training on public text with synthetic noise, minimising
  the MSE to the clean output embedding (Eq. 11-12): the linear path in closed form (ridge), then
  the transformer on what it leaves.

torch is imported at module import; plugins import this module inside their methods only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from rapt_audit.encoder.encode import to_device
from rapt_audit.encoder.models import one_thread
from rapt_audit.mechanisms.noise import dchi_noise
from rapt_audit.utility.state_cache import cached_state
from rapt_audit.utility.training import EarlyStopping, adam, fit


def clip_rows(x: np.ndarray, bound: float) -> np.ndarray:
    """SnD Eq. 3: ``x · min(1, bound / ||x||)`` row by row (rows already within the bound are kept)."""
    norms = np.sqrt(np.einsum("ij,ij->i", x, x))
    factor = np.minimum(1.0, bound / np.maximum(norms, 1e-30))
    return (x * factor[:, None]).astype(x.dtype, copy=False)


def privatize_tokens(clean: np.ndarray, *, eta: float, bound: float | None,
                     rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """dχ noise (one Gamma(d, 1/η) radius per vector) then optional clipping to ``bound``.

    Returns:
        ``(upload, noise)`` with ``noise = upload - clean`` (SnD updates the noise matrix after
        clipping, so the denoiser sees the noise that is actually in the upload).
    """
    clean = np.asarray(clean, dtype=np.float32)
    noisy = clean + dchi_noise(clean.shape[0], clean.shape[1], eta, rng, dtype=np.float32)
    upload = clip_rows(noisy, bound) if bound is not None else noisy
    return upload, upload - clean


class Denoiser(nn.Module):
    """A pre-LayerNorm transformer encoder over ``[e_n; x̃; z]`` whose first output denoises ``e_n``.

    Each segment has its own input projection to ``d_model`` (the segment embedding); token ``i`` and
    its noise ``z_i`` share position embedding ``i``, so attention can pair them. The position table
    starts at N(0, 0.02²) as in BERT: torch's default N(0, 1) is about 20 times the projected
    inputs (token and noise coordinates have an RMS near 0.09 for MiniLM), which buried ``x̃`` and
    ``z`` under the positions and left the transformer learning little more than an offset.

    The output is ``e_n + A·[e_n; mean x̃; mean z; 1] + W·h_0``: a fixed linear path over the pooled
    inputs (``A``, a buffer fitted in closed form by :func:`train_denoiser`; zero until then) and the
    transformer's correction (``W`` initialised to zero), so an untrained denoiser is the identity.
    SnD's Eq. 10 reads ``h_0`` directly with ``d_model`` = the embedding size; here ``d_model`` is
    smaller than the embedding, so ``W·h_0`` alone can only correct a ``d_model``-dimensional
    subspace of ``e_n``, and the linear path gives the full-rank part.
    """

    def __init__(self, dim: int, *, d_model: int, heads: int, d_ff: int, layers: int, max_tokens: int,
                 dropout: float = 0.1) -> None:
        super().__init__()
        self.max_tokens = max_tokens
        self.in_output, self.in_tokens, self.in_noise = (nn.Linear(dim, d_model) for _ in range(3))
        self.position = nn.Embedding(max_tokens, d_model)
        nn.init.normal_(self.position.weight, std=0.02)
        layer = nn.TransformerEncoderLayer(d_model, heads, d_ff, dropout, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, dim)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)
        self.register_buffer("linear", torch.zeros(3 * dim + 1, dim))

    def forward(self, output: torch.Tensor, tokens: torch.Tensor, noise: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
        """Denoised embeddings ``(B, d)`` from ``output (B, d)``, ``tokens``/``noise (B, L, d)``, ``mask (B, L)``."""
        pos = self.position(torch.arange(tokens.shape[1], device=tokens.device))[None]
        h = torch.cat([self.in_output(output)[:, None], self.in_tokens(tokens) + pos, self.in_noise(noise) + pos], 1)
        valid = torch.cat([torch.ones_like(mask[:, :1]), mask, mask], dim=1)
        h = self.encoder(h, src_key_padding_mask=~valid)
        return output + pooled_features(output, tokens, noise, mask) @ self.linear + self.head(self.norm(h[:, 0]))


def pooled_features(output: torch.Tensor, tokens: torch.Tensor, noise: torch.Tensor,
                    mask: torch.Tensor) -> torch.Tensor:
    """``[e_n; mean x̃; mean z; 1]`` per text, ``(B, 3d + 1)``: what the denoiser's linear path reads."""
    weights = mask.unsqueeze(-1).to(tokens.dtype)
    count = weights.sum(1).clamp(min=1)
    return torch.cat([output, (tokens * weights).sum(1) / count, (noise * weights).sum(1) / count,
                      torch.ones_like(output[:, :1])], 1)


@dataclass
class DenoiseBatch:
    """Everything the denoiser reads for a set of texts (numpy), plus the clean targets if known."""

    output: np.ndarray                 # (n, d) server outputs e_n
    tokens: list[np.ndarray]           # per text (n_i, d) uploads
    noise: list[np.ndarray]            # per text (n_i, d) noise kept by the client
    clean: np.ndarray | None = None    # (n, d) clean outputs e_c (training and evaluation only)


class _Padded:
    """A :class:`DenoiseBatch` on the device, padded batch by batch without copying vectors at each step.

    The per-text uploads and noise (each cut to ``max_tokens``) are stacked once into one tensor
    each, with a zero row at the end; a batch is right-padded to its longest text by gathering rows
    (padding reads the zero row), which gives exactly the tensors the per-batch numpy padding gave.
    Only the batch's row indices travel from the host, without a device synchronisation.
    """

    def __init__(self, batch: DenoiseBatch, max_tokens: int, device: str) -> None:
        d = batch.output.shape[1]
        self.device = device
        self.lengths = np.array([min(len(t), max_tokens) for t in batch.tokens], dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(self.lengths)[:-1]]).astype(np.int64)
        self.pad_row = int(self.lengths.sum())

        def stack(seqs: Sequence[np.ndarray]) -> torch.Tensor:
            rows = [np.asarray(s[:n], dtype=np.float32).reshape(n, d) for s, n in zip(seqs, self.lengths)]
            return torch.as_tensor(np.concatenate(rows + [np.zeros((1, d), np.float32)]), device=device)

        self.tokens, self.noise = stack(batch.tokens), stack(batch.noise)
        self.output = torch.as_tensor(np.asarray(batch.output, dtype=np.float32), device=device)

    def __call__(self, idx: np.ndarray) -> tuple[torch.Tensor, ...]:
        """``(output, tokens, noise, mask)`` of the texts ``idx``: ``(B, d)``, ``(B, L, d)`` twice, ``(B, L)``."""
        lengths = self.lengths[idx]
        positions = np.arange(max(1, int(lengths.max(initial=0))))
        mask = positions[None, :] < lengths[:, None]
        rows = to_device(np.where(mask, self.starts[idx][:, None] + positions[None, :], self.pad_row), self.device)
        return (self.output[to_device(idx, self.device)], self.tokens[rows], self.noise[rows],
                to_device(mask, self.device))


def denoise(model: Denoiser, batch: DenoiseBatch, *, device: str = "cpu", batch_size: int = 64) -> np.ndarray:
    """Apply a trained denoiser: ``(n, d)`` float32 denoised embeddings."""
    return _denoise_padded(model, _Padded(batch, model.max_tokens, device), batch_size=batch_size)


def _denoise_padded(model: Denoiser, padded: _Padded, *, batch_size: int = 64) -> np.ndarray:
    """:func:`denoise` of texts already on the device (validation reuses them at every epoch)."""
    model.eval()
    n = len(padded.lengths)
    with torch.no_grad(), one_thread(padded.device):
        # Every batch is queued before the result is read (once, at the end).
        out = [model(*padded(np.arange(start, min(start + batch_size, n)))) for start in range(0, n, batch_size)]
    return torch.cat(out).cpu().numpy() if out else np.empty((0, padded.output.shape[1]), dtype=np.float32)


@dataclass
class DenoiserFit:
    """A trained denoiser and its held-out diagnostics on public text.

    ``valid_mse_noisy``: the identity (``e_n`` itself); ``valid_mse_linear``: after the closed-form
    linear path alone (ridge penalty ``ridge_alpha`` × the number of training rows, chosen on the
    held-out texts; 0 with a zero path when no penalty beat the identity there); ``valid_mse_denoised``:
    the chosen epoch of the whole denoiser (epoch 0 = the linear path alone).
    """

    model: Denoiser
    best_epoch: int
    valid_mse_noisy: float
    valid_mse_denoised: float
    history: list[float] = field(default_factory=list)
    valid_mse_linear: float = math.nan
    ridge_alpha: float = 0.0


#: Ridge penalties tried for the linear path, per training row (on standardised features).
RIDGE_ALPHAS = (1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0, 3.0, 10.0)


def mse_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per-row mean squared error between two ``(n, d)`` arrays."""
    diff = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    return np.einsum("ij,ij->i", diff, diff) / diff.shape[1]


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per-row cosine similarity between two ``(n, d)`` arrays."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    denom = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return np.divide(np.einsum("ij,ij->i", a, b), denom, out=np.zeros(len(a)), where=denom > 0)


def train_denoiser(train: DenoiseBatch, valid: DenoiseBatch, *, d_model: int, heads: int, d_ff: int, layers: int,
                   max_tokens: int, epochs: int, lr: float, batch_size: int, seed: int,
                   device: str = "cpu") -> DenoiserFit:
    """Minimise ``||D(e_n, X̃, Z) - e_c||²`` on public training texts; keep the epoch with the lowest
    MSE on held-out *public* texts (never on the victim's data).

    First the linear path (:class:`Denoiser`) is fitted in closed form: ridge regression of
    ``e_c - e_n`` on the pooled inputs, its penalty chosen on the held-out texts. Then the
    transformer learns what the path leaves; epoch 0 (the path alone) is a candidate, so the
    denoiser is never worse on the held-out texts than the path, nor the path than the identity.
    """
    torch.manual_seed(seed)
    order_rng = np.random.default_rng(seed)
    model = Denoiser(train.output.shape[1], d_model=d_model, heads=heads, d_ff=d_ff, layers=layers,
                     max_tokens=max_tokens).to(device)
    optimizer = adam(model.parameters(), lr=lr, weight_decay=0.01, decoupled=True)
    target = torch.as_tensor(train.clean.astype(np.float32), device=device)
    noisy_mse = float(mse_rows(valid.output, valid.clean).mean())  # the untrained denoiser is the identity
    padded, valid_padded = _Padded(train, max_tokens, device), _Padded(valid, max_tokens, device)
    lengths = padded.lengths
    with one_thread(device):
        linear, linear_mse, alpha = fit_linear_path(_features(padded), train.clean - train.output,
                                                    _features(valid_padded), valid.clean - valid.output)
    model.linear.copy_(torch.as_tensor(linear, dtype=torch.float32, device=device))

    def batches() -> list[np.ndarray]:
        # Batches of similar length waste less compute on padding; their order is shuffled.
        order = order_rng.permutation(len(lengths))
        order = order[np.argsort(lengths[order], kind="stable")]
        chunks = np.array_split(order, max(1, math.ceil(len(order) / batch_size)))
        return [chunks[c] for c in order_rng.permutation(len(chunks))]

    def loss(idx: np.ndarray) -> torch.Tensor:
        return nn.functional.mse_loss(model(*padded(idx)), target[to_device(idx, device)])

    def valid_mse(model: Denoiser) -> float:
        return float(mse_rows(_denoise_padded(model, valid_padded), valid.clean).mean())

    with one_thread(device):
        outcome = fit(model, loss=loss, batches=batches, optimizer=optimizer,
                      stop=EarlyStopping(epochs, valid_mse, maximize=False, untrained=True))
    return DenoiserFit(model, outcome.best_epoch, noisy_mse, outcome.best_score, outcome.scores[1:],
                       valid_mse_linear=linear_mse, ridge_alpha=alpha)


def _features(padded: _Padded, batch_size: int = 256) -> np.ndarray:
    """:func:`pooled_features` of every text of ``padded`` (float64 numpy, in order)."""
    n = len(padded.lengths)
    with torch.no_grad():
        parts = [pooled_features(*padded(np.arange(start, min(start + batch_size, n))))
                 for start in range(0, n, batch_size)]
    return torch.cat(parts).double().cpu().numpy() if parts else np.zeros((0, padded.output.shape[1] * 3 + 1))


def fit_linear_path(features: np.ndarray, residual: np.ndarray, valid_features: np.ndarray, valid_residual: np.ndarray,
                    alphas: Sequence[float] = RIDGE_ALPHAS) -> tuple[np.ndarray, float, float]:
    """Ridge regression of ``residual`` (``e_c - e_n``) on ``features`` (last column: the constant 1).

    Columns are standardised on the training rows; the penalty is ``alpha`` × the number of rows for
    the ``alpha`` with the lowest held-out MSE. Returns ``(A, held-out MSE, alpha)`` with
    ``A`` of shape ``(k, d)`` acting on raw features; a zero ``A`` (and alpha 0) when no penalty
    beats predicting no correction on the held-out rows.
    """
    x, y = features[:, :-1], np.asarray(residual, dtype=np.float64)
    mu, sd = x.mean(0), x.std(0)
    sd = np.where(sd > 1e-12, sd, 1.0)
    xs, y_mean = (x - mu) / sd, y.mean(0)
    eigval, eigvec = np.linalg.eigh(xs.T @ xs)
    projected = eigvec.T @ (xs.T @ (y - y_mean))
    best = (np.zeros((features.shape[1], y.shape[1])), float(np.mean(np.square(valid_residual))), 0.0)
    for alpha in alphas:
        w = eigvec @ (projected / (eigval + alpha * len(x))[:, None]) / sd[:, None]
        a = np.vstack([w, y_mean - mu @ w])
        score = float(np.mean(np.square(valid_features @ a - valid_residual)))
        if score < best[1]:
            best = (a, score, float(alpha))
    return best


def subset(batch: DenoiseBatch, idx: Sequence[int]) -> DenoiseBatch:
    """The rows ``idx`` of a batch."""
    idx = np.asarray(idx, dtype=np.int64)
    return DenoiseBatch(batch.output[idx], [batch.tokens[i] for i in idx], [batch.noise[i] for i in idx],
                        None if batch.clean is None else batch.clean[idx])


#: DenoiserFit's fields other than the model: what a stored denoiser keeps beside its weights.
_FIT_RECORD = ("best_epoch", "valid_mse_noisy", "valid_mse_denoised", "history", "valid_mse_linear", "ridge_alpha")


def stored_denoiser(folder: Path, signature: Mapping[str, Any], *, train: Callable[[], DenoiserFit], dim: int,
                    architecture: Mapping[str, int], device: str = "cpu") -> tuple[DenoiserFit, bool]:
    """The denoiser for ``signature``: read from ``folder`` when stored, else trained by ``train`` and stored
    (:func:`~rapt_audit.utility.state_cache.cached_state`); returns it and whether it came from the folder.

    The denoiser is trained on public text only, so it depends on η, the seed and the settings, never on the
    victim's data: a benchmark's SST-2 and Trustpilot cells of one setting and seed share it, where each trained
    it anew before (about 5 minutes of a cpu-profile cell). ``architecture`` holds :class:`Denoiser`'s sizes."""

    def trained() -> tuple[Denoiser, dict[str, Any]]:
        result = train()
        # Plain Python numbers: the store is read back with torch.load(weights_only=True), which refuses numpy's.
        record = {name: float(getattr(result, name)) for name in _FIT_RECORD if name not in ("best_epoch", "history")}
        return result.model, {**record, "best_epoch": int(result.best_epoch),
                              "history": [float(v) for v in result.history]}

    def restore(state: dict[str, Any]) -> Denoiser:
        model = Denoiser(dim, **architecture).to(device)
        model.load_state_dict(state)
        return model.eval()

    model, record, cached = cached_state(folder, signature, train=trained, restore=restore, device=device)
    return DenoiserFit(model, **{name: record[name] for name in _FIT_RECORD}), cached

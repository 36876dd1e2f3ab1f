"""Running the encoder on (possibly noisy) input embeddings and pooling the output.

Used for the utility of embedding-release defenses: the service receives noisy token embeddings,
adds the public [CLS]/[SEP] embeddings itself, runs the rest of the model, and mean-pools the last
hidden states. A logistic-regression probe on those pooled vectors measures task utility.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from rapt_audit.models import LoadedModel

MAX_TOKENS = 126  # 128 positions minus [CLS] and [SEP] (the papers' maximum length)


def pad_embeddings(seqs: Sequence):  # noqa: ANN201 - (torch.Tensor, torch.Tensor)
    """Right-pad ``(n_i, d)`` tensors into one ``(batch, max n, d)`` tensor and its attention mask."""
    import torch

    first = seqs[0]
    length = max(x.shape[0] for x in seqs)
    embeds = torch.zeros(len(seqs), length, first.shape[1], device=first.device)
    mask = torch.zeros(len(seqs), length, dtype=torch.long, device=first.device)
    for row, x in enumerate(seqs):
        embeds[row, :x.shape[0]] = x
        mask[row, :x.shape[0]] = 1
    return embeds, mask


def pooled_from_embeddings(model: LoadedModel, sequences: Sequence[np.ndarray], *, batch_size: int = 64) -> np.ndarray:
    """Mean-pooled last hidden states for each sequence of input embeddings ``(n_i, d)``.

    Sequences longer than ``MAX_TOKENS`` are truncated; empty sequences pool [CLS] and [SEP] only.
    """
    import torch

    tok = model.tokenizer
    table = model.model.get_input_embeddings().weight
    cls_vec = table[tok.cls_token_id].detach() if tok.cls_token_id is not None else None
    sep_vec = table[tok.sep_token_id].detach() if tok.sep_token_id is not None else None
    out = np.empty((len(sequences), model.model.config.hidden_size), dtype=np.float32)
    order = np.argsort([len(s) for s in sequences])  # similar lengths together: less padding
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            parts = []
            for i in idx:
                body = torch.as_tensor(np.asarray(sequences[i][:MAX_TOKENS], dtype=np.float32), device=model.device)
                pieces = [v[None] for v in (cls_vec,) if v is not None] + [body.reshape(-1, table.shape[1])]
                pieces += [v[None] for v in (sep_vec,) if v is not None]
                parts.append(torch.cat(pieces))
            embeds, mask = pad_embeddings(parts)
            hidden = model.model(inputs_embeds=embeds, attention_mask=mask).last_hidden_state
            weights = mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1)
            out[idx] = pooled.float().cpu().numpy()
    return out


def probe_utility(train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray, test_y: np.ndarray, *,
                  rng: np.random.Generator) -> dict:
    """Accuracy and macro-F1 of a standardised logistic-regression probe, with bootstrap CIs."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import f1_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from rapt_audit.stats import bootstrap_mean, bootstrap_statistic

    classifier = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=3000))
    classifier.fit(train_x, train_y)
    predicted = classifier.predict(test_x)
    accuracy = bootstrap_mean((predicted == test_y).astype(float), rng=rng)

    def macro_f1(idx: np.ndarray) -> float:
        return float(f1_score(test_y[idx], predicted[idx], average="macro", zero_division=0))

    return {"accuracy": accuracy, "macro_f1": bootstrap_statistic(len(test_y), macro_f1, rng=rng, resamples=300)}

"""The token classifier the trained NER attacks fine-tune (``ner``, ``ner_adaptive``): build, train, predict.

The embedded model with a token-classification head is fine-tuned through the one training loop
(:func:`rapt_audit.utility.training.fit`) on words with IOB tags, the first sub-token of each word
carrying its tag. :data:`CODE_VERSION` names this code in the signature of a cached classifier
(:mod:`rapt_audit.utility.state_cache`), so a classifier is reused only by the code that trained it.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from rapt_audit.api.context import RunContext
from rapt_audit.api.digests import code_digest
from rapt_audit.utility import training
from rapt_audit.utility.on_device import autocast
from rapt_audit.utility.training import Epochs, adam, fit, length_batches, padded_rows


#: The code that builds, trains and tags with the classifier (its cached weights are reused only by it).
CODE_VERSION = code_digest(__file__, training.__file__, Path(__file__).with_name("_ner_tags.py"),
                           Path(__file__).with_name("ner.py"))


def token_classifier(attack: Any, *, ctx: RunContext, state: Mapping[str, Any] | None = None) -> Any:
    """The embedded model with a token-classification head for the attack's labels, on the run's device:
    freshly initialised from the run seed, or holding ``state`` (a cached trained classifier)."""
    import torch  # lazy (torch)
    from transformers import AutoConfig, AutoModelForTokenClassification  # lazy (transformers)
    from transformers.utils import logging as hf_logging  # lazy (transformers)

    labels = {"num_labels": len(attack._labels), "id2label": dict(enumerate(attack._labels)),
              "label2id": {label: i for i, label in enumerate(attack._labels)}}
    if state is not None:
        # Every weight comes from ``state``: build the architecture alone rather than read the public
        # weights from disk only to overwrite them.
        model = AutoModelForTokenClassification.from_config(AutoConfig.from_pretrained(ctx.encoder().path, **labels))
        model.load_state_dict(state)
        model.eval()  # as training leaves it (utility.training.fit ends in eval mode)
        return model.to(ctx.device)
    torch.manual_seed(ctx.seed_for("attack", attack.name, "init"))
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # "some weights were newly initialised" is expected: the new head
    try:
        model = AutoModelForTokenClassification.from_pretrained(ctx.encoder().path, **labels)
    finally:
        hf_logging.set_verbosity(verbosity)
    return model.to(ctx.device)


def encode_words(tokenizer: Any, words: Sequence[Sequence[str]], *,
                 max_length: int) -> tuple[dict[str, Any], np.ndarray, list[np.ndarray]]:
    """Every sentence tokenized once, padded to the longest: CPU id tensors, token counts, first sub-tokens.

    A batch's rows cut to the batch's longest row (``tensor[rows, :length]``) are exactly what
    tokenizing the batch alone with ``padding=True`` gives (right padding), so training and tagging
    need no tokenizer call per batch.

    Returns:
        ``(inputs, lengths, first)``: the tokenizer's tensors (``(n, longest)``), the tokens of each
        sentence, and per sentence the ``(position, word)`` pairs of each word's first sub-token
        (``(k, 2)`` int64; words cut off by ``max_length`` have none).
    """
    enc = tokenizer([list(w) for w in words], is_split_into_words=True, truncation=True, max_length=max_length,
                    padding=True, return_tensors="pt")
    lengths = enc["attention_mask"].sum(dim=1).numpy()
    first = []
    for row in range(len(words)):
        pairs, previous = [], None
        for pos, word in enumerate(enc.word_ids(row)):
            if word is not None and word != previous:  # the first sub-token of each word
                pairs.append((pos, word))
            previous = word
        first.append(np.array(pairs, dtype=np.int64).reshape(-1, 2))
    return dict(enc), lengths, first


def train_token_classifier(attack: Any, words: list[list[str]], tags: list[list[str]], *,
                            ctx: RunContext) -> Any:
    """Fine-tune :func:`token_classifier` on ``words`` with IOB ``tags`` (AdamW, warm-up then linear decay).

    Sentences are tokenized once and kept on the run's device; each step gathers its batch (of
    similar lengths, :func:`length_batches`) cut to the batch's longest row.
    """
    import torch  # lazy (torch)

    label_id = {label: i for i, label in enumerate(attack._labels)}
    model = token_classifier(attack, ctx=ctx)
    model.train()
    if attack.freeze_embeddings:  # a third of MiniLM's weights; freezing them makes CPU steps ~25 % cheaper
        model.get_input_embeddings().weight.requires_grad_(False)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = adam(trainable, lr=attack.lr, weight_decay=0.01, decoupled=True)
    order_rng = ctx.rng("attack", attack.name, "order")
    keep = [k for k, w in enumerate(words) if w]
    # Linear warm-up over the first 10 % of steps, then linear decay to 0 (the usual BERT fine-tuning schedule).
    total = max(1, attack.epochs * -(-len(keep) // attack.batch_size))
    warmup = max(1, total // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min((step + 1) / warmup, max(0.0, (total - step) / max(1, total - warmup))))
    # Tokenized once and kept on the device with the labels (the first sub-token of each word carries
    # its tag, every other position -100); a step only gathers its rows.
    inputs, lengths, first = encode_words(ctx.encoder().tokenizer, [words[k] for k in keep],
                                          max_length=attack.max_length)
    labels = np.full(tuple(inputs["input_ids"].shape), -100, dtype=np.int64)
    for row, k in enumerate(keep):
        labels[row, first[row][:, 0]] = [label_id.get(tags[k][word], 0) for word in first[row][:, 1]]
    inputs = {key: v.to(ctx.device) for key, v in inputs.items()}
    inputs["labels"] = torch.as_tensor(labels, device=ctx.device)

    def loss(positions: np.ndarray) -> Any:
        return model(**padded_rows(inputs, lengths, positions, ctx.device)[1]).loss

    fit(model, loss=loss, batches=length_batches([len(words[k]) for k in keep], attack.batch_size, rng=order_rng),
        optimizer=optimizer, stop=Epochs(attack.epochs), after_step=schedule.step,
        autocast=functools.partial(autocast, ctx.device, ctx.precision))
    return model


def predict_tags(attack: Any, words: list[list[str]], *, ctx: RunContext,
                 batch_size: int = 32) -> list[list[str]]:
    """The trained classifier's tag for the first sub-token of each word (``O`` past the length limit).

    Sentences run in batches of ``batch_size`` in order of length; all batches are queued on the
    device and their predictions read once.
    """
    import torch  # lazy (torch)

    limit = min(attack.predict_max_length, int(attack._model.config.max_position_embeddings))
    out: list[list[str]] = [["O"] * len(w) for w in words]
    order = [k for k in np.argsort([len(w) for w in words], kind="stable") if words[k]]
    inputs, lengths, first = encode_words(ctx.encoder().tokenizer, [words[k] for k in order], max_length=limit)
    inputs = {key: v.to(ctx.device) for key, v in inputs.items()}
    best = []
    with torch.inference_mode(), autocast(ctx.device, ctx.precision):
        # Every batch is queued before any prediction is read (once, at the end).
        for start in range(0, len(order), batch_size):
            rows = np.arange(start, min(start + batch_size, len(order)))
            best.append(attack._model(**padded_rows(inputs, lengths, rows, ctx.device)[1]).logits.argmax(-1))
        best = [b.cpu().numpy() for b in best]
    for row, k in enumerate(order):
        for pos, word in first[row]:
            out[k][word] = attack._labels[best[row // batch_size][row % batch_size, pos]]
    return out


__all__ = ["CODE_VERSION", "encode_words", "predict_tags", "token_classifier",
           "train_token_classifier"]

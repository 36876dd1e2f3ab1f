"""The token classifier the trained NER attacks fine-tune (``ner``, ``ner_adaptive``): build, train, predict.

The embedded model with a token-classification head is fine-tuned through the one training loop
(:func:`rapt_audit.utility.training.fit`) on words with IOB tags, the first sub-token of each word
carrying its tag. :data:`CODE_VERSION` names this code in the signature of a cached classifier
(:mod:`rapt_audit.utility.state_cache`), so a classifier is reused only by the code that trained it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from rapt_audit.api.version import __version__
from rapt_audit.pipeline.context import RunContext
from rapt_audit.utility import training
from rapt_audit.utility.training import Epochs, fit


def _code_version() -> str:
    """The package version and a hash of the code that builds, trains and tags with the classifier."""
    digest = hashlib.sha256(__version__.encode("utf-8"))
    here = Path(__file__)
    for module in (here, Path(training.__file__), here.with_name("_ner_tags.py"), here.with_name("ner.py")):
        digest.update(Path(module).read_bytes())
    return digest.hexdigest()[:16]


CODE_VERSION = _code_version()


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


def train_token_classifier(attack: Any, words: list[list[str]], tags: list[list[str]], *,
                            ctx: RunContext) -> Any:
    import torch  # lazy (torch)

    encoder = ctx.encoder()
    label_id = {label: i for i, label in enumerate(attack._labels)}
    model = token_classifier(attack, ctx=ctx)
    model.train()
    if attack.freeze_embeddings:  # a third of MiniLM's weights; freezing them makes CPU steps ~25 % cheaper
        model.get_input_embeddings().weight.requires_grad_(False)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=attack.lr, weight_decay=0.01)
    order_rng = ctx.rng("attack", attack.name, "order")
    keep = [k for k, w in enumerate(words) if w]
    # Linear warm-up over the first 10 % of steps, then linear decay to 0 (the usual BERT fine-tuning schedule).
    total = max(1, attack.epochs * -(-len(keep) // attack.batch_size))
    warmup = max(1, total // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min((step + 1) / warmup, max(0.0, (total - step) / max(1, total - warmup))))

    def loss(positions: np.ndarray) -> Any:
        batch = [keep[k] for k in positions]
        enc = encoder.tokenizer([words[k] for k in batch], is_split_into_words=True, truncation=True,
                                max_length=attack.max_length, padding=True, return_tensors="pt")
        labels = torch.full(enc["input_ids"].shape, -100, dtype=torch.long)
        for row, k in enumerate(batch):
            previous = None
            for pos, word in enumerate(enc.word_ids(row)):
                if word is not None and word != previous:  # label the first sub-token of each word
                    labels[row, pos] = label_id.get(tags[k][word], 0)
                previous = word
        return model(**{key: v.to(ctx.device) for key, v in enc.items()}, labels=labels.to(ctx.device)).loss

    fit(model, loss=loss, batches=lambda: length_batches([len(words[k]) for k in keep], attack.batch_size, order_rng),
        optimizer=optimizer, stop=Epochs(attack.epochs), after_step=schedule.step)
    return model


def length_batches(lengths: Sequence[int], size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Batches of similar length (less padding), in random order: sort by length plus jitter, chunk, shuffle."""
    key = np.asarray(lengths, dtype=float) + rng.uniform(0, 4, size=len(lengths))
    order = np.argsort(key, kind="stable")
    batches = [order[i:i + size] for i in range(0, len(order), size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def predict_tags(attack: Any, words: list[list[str]], *, ctx: RunContext,
             batch_size: int = 32) -> list[list[str]]:
    import torch  # lazy (torch)

    tokenizer = ctx.encoder().tokenizer
    limit = min(attack.predict_max_length, int(attack._model.config.max_position_embeddings))
    out: list[list[str]] = [["O"] * len(w) for w in words]
    order = [k for k in np.argsort([len(w) for w in words], kind="stable") if words[k]]
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            batch = order[start:start + batch_size]
            enc = tokenizer([words[k] for k in batch], is_split_into_words=True, truncation=True, max_length=limit,
                            padding=True, return_tensors="pt")
            best = attack._model(**{key: v.to(ctx.device) for key, v in enc.items()}).logits.argmax(-1).cpu().numpy()
            for row, k in enumerate(batch):
                previous = None
                for pos, word in enumerate(enc.word_ids(row)):
                    if word is not None and word != previous:
                        out[k][word] = attack._labels[best[row, pos]]
                    previous = word
    return out


#: Fewer steps on CPU, so a larger learning rate; the paper profile keeps the defaults (all of
#: CoNLL-2003's training sentences, 3 epochs, lr 5e-5, embeddings trained).
__all__ = ["CODE_VERSION", "length_batches", "predict_tags", "token_classifier", "train_token_classifier"]

"""The service's task model: the public encoder with a customization method applied, and its heads.

:func:`build_task_model` copies the public encoder, applies the method (prompt tuning, prefix tuning
or LoRA through ``peft``; full fine-tuning), and adds a linear task head on the mean of the input's
hidden states (and, for RAPT, the reconstruction head of the plain tokens).

The model reads either token ids (a text release) or, for a token-embedding release, token ids of
what the service adds itself ([CLS], [SEP], padding) together with the user's released vectors for
every other position (:mod:`rapt_audit.utility.token_vectors`): those positions' input embeddings
*are* the released vectors, and peft's prompt tuning prepends its virtual tokens to them as it does
to looked-up ids.
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import asdict, dataclass
from typing import Any

LORA_R, LORA_ALPHA, LORA_DROPOUT = 16, 32, 0.05  # RAPT's LoRA setting (rank 16, alpha 32, dropout 0.05)
#: LoRA's targets, the attention's query and value projections (RAPT's setting), as each architecture names them
#: where peft's own table does not (it has BERT's and RoBERTa's ``query``/``value``, not MPNet's ``q``/``v``).
LORA_TARGETS = {"mpnet": ["q", "v"]}


@dataclass(frozen=True)
class TrainSettings:
    """Resolved training settings of one customization run (recorded in the result).

    ``epochs`` is the maximum under early stopping (the exact count without a validation split);
    ``patience`` is how many epochs without a better validation accuracy stop training.
    ``precision`` is ``fp32`` or ``bf16`` (mixed precision, :func:`rapt_audit.utility.on_device.autocast`).
    """

    method: str
    epochs: int
    lr: float
    batch_size: int
    max_length: int
    virtual_tokens: int
    patience: int = 1
    lora_r: int = LORA_R
    lora_alpha: int = LORA_ALPHA
    lora_dropout: float = LORA_DROPOUT
    rec_hidden: int = 96
    rec_weight: float = 1.0
    precision: str = "fp32"  # a run passes its own (ctx.precision: bf16 where the hardware has it)

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form."""
        return asdict(self)


def _task_model_class():  # noqa: ANN202 - defined lazily so that importing this module loads no torch
    import torch  # lazy (torch)
    from torch import nn  # lazy (torch)

    class TaskModel(nn.Module):
        """Backbone (PEFT-wrapped or fully trainable) + mean-pooled task head (+ reconstruction head)."""

        def __init__(self, backbone: nn.Module, hidden: int, n_labels: int, *, skip: int,
                     rec_vocabulary: int = 0, rec_hidden: int = 96) -> None:
            super().__init__()
            self.backbone = backbone
            self.skip = skip  # prompt tuning puts its virtual tokens first in the output
            self.task_head = nn.Linear(hidden, n_labels)
            self.reconstruction = (nn.Sequential(nn.Linear(hidden, rec_hidden, bias=False),  # W_up
                                                 nn.Linear(rec_hidden, rec_vocabulary, bias=False))  # W_down
                                   if rec_vocabulary else None)

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, task_mask: torch.Tensor,
                    plain_positions: torch.Tensor | None = None, *, released: torch.Tensor | None = None,
                    released_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
            """Task logits (and reconstruction logits with ``plain_positions``).

            ``released`` (``(b, w, d)``) and ``released_mask`` (``(b, w)``, True where the user sent a
            vector) replace the input embeddings of those positions by the released vectors; the
            other positions are looked up from ``input_ids`` in the backbone's own table.
            """
            if released is None:
                hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            else:
                own = self.backbone.get_input_embeddings()(input_ids)
                embeds = torch.where(released_mask.unsqueeze(-1), released.to(own.dtype), own)
                hidden = self.backbone(inputs_embeds=embeds, attention_mask=attention_mask).last_hidden_state
            hidden = hidden[:, self.skip:]
            weights = task_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1)
            logits = self.task_head(pooled)
            rec_logits = None
            if self.reconstruction is not None and plain_positions is not None:
                index = plain_positions.unsqueeze(-1).expand(-1, -1, hidden.shape[-1])
                rec_logits = self.reconstruction(hidden.gather(1, index))
            return logits, rec_logits

        def drop_reconstruction(self) -> None:
            """Discard the reconstruction head (RAPT keeps only the task model after training)."""
            self.reconstruction = None

    return TaskModel


def run_batch(model: Any, batch: dict[str, Any], *, plain: bool = False) -> tuple[Any, Any]:
    """``model``'s (task logits, reconstruction logits) for one batch of ``Tokenized`` or ``Embedded`` rows."""
    return model(batch["input_ids"], batch["attention_mask"], batch["task_mask"],
                 batch.get("plain_positions") if plain else None, released=batch.get("released"),
                 released_mask=batch.get("released_mask"))


def lora_targets(model_type: str) -> list[str]:
    """The query and value projections' module names for ``model_type`` (:data:`LORA_TARGETS`, then peft's table,
    then BERT's names)."""
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as known  # lazy (peft)

    return list(LORA_TARGETS.get(model_type) or known.get(model_type) or ["query", "value"])


def build_task_model(loaded: Any, settings: TrainSettings, n_labels: int, *, rec_vocabulary: int = 0):  # noqa: ANN201
    """A trainable copy of ``loaded``'s encoder with the method applied and fresh heads.

    The process-wide model is read-only (rapt_audit.encoder.models), so the backbone is a deep copy.
    """
    from peft import LoraConfig, PrefixTuningConfig, PromptTuningConfig, TaskType, get_peft_model  # lazy (peft)

    backbone = copy.deepcopy(loaded.model).to(loaded.device)
    hidden = int(backbone.config.hidden_size)
    skip = 0
    if settings.method == "full":
        for name, parameter in backbone.named_parameters():
            # The pooler feeds nothing here (the task head reads mean-pooled hidden states).
            parameter.requires_grad_(not name.startswith("pooler."))
    else:
        task, tokens = TaskType.FEATURE_EXTRACTION, settings.virtual_tokens
        if settings.method == "prompt":
            config = PromptTuningConfig(task_type=task, num_virtual_tokens=tokens)
            skip = tokens
        elif settings.method == "prefix":
            config = PrefixTuningConfig(task_type=task, num_virtual_tokens=tokens)
        else:
            config = LoraConfig(task_type=task, r=settings.lora_r, lora_alpha=settings.lora_alpha,
                                lora_dropout=settings.lora_dropout,
                                target_modules=lora_targets(str(getattr(backbone.config, "model_type", ""))))
        with warnings.catch_warnings():  # peft calls a transformers API deprecated in v5; harmless
            warnings.filterwarnings("ignore", category=FutureWarning)
            backbone = get_peft_model(backbone, config)
    model_class = _task_model_class()
    return model_class(backbone, hidden, n_labels, skip=skip, rec_vocabulary=rec_vocabulary,
                       rec_hidden=settings.rec_hidden).to(loaded.device)


__all__ = ["LORA_TARGETS", "build_task_model", "lora_targets", "run_batch"]

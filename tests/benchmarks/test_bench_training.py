"""Speed of the service's training step: float32 against bfloat16, random against length-bucketed batches.

Issue #29: on the project's 2-core CPU (AVX-512 BF16) a prompt-tuning step of MiniLM ran about twice
as fast under bfloat16 autocast, and SST-2's short sentences paid for the longest text of each random
batch. These benchmarks time one epoch of prompt tuning (the ``cpu`` profile's settings: 20 virtual
tokens, batch 16, max length 64) through the one training loop, in the four combinations, so that a
change that loses either gain shows up in ``--benchmark-compare``. Figures, not timed assertions.

Run: ``pytest tests/benchmarks/test_bench_training.py -m benchmark --benchmark-enable``. The texts are
SST-2's first training sentences where ``$RAPT_AUDIT_DATA`` holds SST-2, else the synthetic corpus's
(``extra_info["texts"]`` says which); ``extra_info["positions"]`` counts the token positions an
epoch computes, the work that bucketing saves.
"""

from __future__ import annotations

import numpy as np
import pytest

from rapt_audit.pipeline.context import RunContext

pytestmark = pytest.mark.benchmark

TEXTS = 128
BATCH = 16


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from rapt_audit.data import load_dataset
    from rapt_audit.utility.customize import resolve_settings
    from rapt_audit.utility.task_model import build_task_model
    from rapt_audit.utility.on_device import tokenize

    ctx = RunContext(seed=0, profile="cpu", device="cpu", cache_dir=tmp_path_factory.mktemp("bench-train"))
    try:
        records, source = load_dataset("sst2").records, "sst2"
    except Exception:  # noqa: BLE001 - no data directory: the bundled synthetic corpus
        records, source = load_dataset("synthetic").records, "synthetic"
    texts = [r.text for r in records[:TEXTS]]
    labels = np.array([r.label for r in records[:TEXTS]], dtype=np.int64)
    loaded = ctx.encoder()
    settings = resolve_settings("prompt", "cpu")
    tokens = tokenize(loaded.tokenizer, texts, plain_count=0, max_length=settings.max_length, device="cpu")
    return loaded, settings, tokens, labels, source, build_task_model


@pytest.mark.parametrize("batching", ["random", "by_length"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_prompt_tuning_epoch(benchmark, setup, precision, batching):
    import torch

    from rapt_audit.utility.on_device import autocast
    from rapt_audit.utility.training import Epochs, fit, length_batches, shuffled

    loaded, settings, tokens, labels, source, build_task_model = setup
    torch.manual_seed(0)
    model = build_task_model(loaded, settings, int(labels.max()) + 1)
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=settings.lr)
    y = torch.as_tensor(labels)
    def batches_from(seed: int):
        if batching == "random":
            return shuffled(len(tokens), BATCH, rng=np.random.default_rng(seed))
        return length_batches(tokens.lengths, BATCH, rng=np.random.default_rng(seed))

    batches = batches_from(0)
    # Token positions one epoch computes (rows × the batch's longest row), from the same first draw.
    positions = sum(len(b) * int(tokens.lengths[b].max()) for b in batches_from(0)())

    def loss(idx: np.ndarray):
        batch = tokens.batch(idx)
        logits, _ = model(batch["input_ids"], batch["attention_mask"], batch["task_mask"])
        return torch.nn.functional.cross_entropy(logits, y[batch["rows"]])

    def epoch() -> None:
        fit(model, loss=loss, batches=batches, optimizer=optimizer, stop=Epochs(1),
            autocast=lambda: autocast("cpu", precision))

    benchmark.pedantic(epoch, rounds=3, warmup_rounds=1)
    if benchmark.stats:
        benchmark.extra_info.update(texts=source, positions=positions,
                                    texts_per_s=len(tokens) / benchmark.stats.stats.mean)

"""Feeding ragged sequences of input embeddings to the frozen encoder: one gather per padded batch.

``pooled_from_embeddings`` (the embedding defenses' and clean pooled outputs) and the attacks'
``contextual_states`` both build their batches with ``encode.input_rows`` / ``encode.padded_inputs``.
Each is checked against the encoder run on every sequence alone, unpadded, with explicit [CLS] and
[SEP] rows: batching, padding, truncation and windows must not change what a sequence gets.
The bundled MiniLM loads once per session (a few seconds); the forwards are small.
"""

from __future__ import annotations

import numpy as np
import pytest

from rapt_audit.encoder.encode import MAX_TOKENS, padded_inputs, pooled_from_embeddings


@pytest.fixture(scope="module")
def minilm():
    from rapt_audit.encoder.models import load_model

    return load_model("minilm")


def hidden_alone(model, body: np.ndarray) -> np.ndarray:
    """Last hidden states of [CLS] ``body`` [SEP], one unpadded sequence without a mask."""
    import torch

    table = model.model.get_input_embeddings().weight.detach()
    tok = model.tokenizer
    x = torch.cat([table[[tok.cls_token_id]], torch.as_tensor(body, dtype=torch.float32).reshape(-1, table.shape[1]),
                   table[[tok.sep_token_id]]])
    with torch.inference_mode():
        return model.model(inputs_embeds=x[None]).last_hidden_state[0].numpy()


def test_padded_inputs_right_pads_with_the_zero_row():
    import torch

    rows = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [0.0, 0.0]])
    embeds, mask = padded_inputs(rows, [np.array([2, 0, 1]), np.array([], dtype=np.int64), np.array([1])], 3)
    assert embeds.tolist() == [[[5, 6], [1, 2], [3, 4]], [[0, 0], [0, 0], [0, 0]], [[3, 4], [0, 0], [0, 0]]]
    assert mask.dtype == torch.int64 and mask.tolist() == [[1, 1, 1], [0, 0, 0], [1, 0, 0]]


def test_pooled_from_embeddings_matches_each_sequence_alone(minilm):
    rng = np.random.default_rng(0)
    # Empty (pools [CLS] and [SEP] only), longer than MAX_TOKENS (truncated), exactly MAX_TOKENS, short;
    # batches of 2 put different lengths side by side, so padding and the mask matter.
    lengths = [0, MAX_TOKENS + 9, 3, MAX_TOKENS, 1]
    seqs = [rng.normal(scale=0.05, size=(n, minilm.dim)).astype(np.float32) for n in lengths]
    seqs[0] = []  # an empty list, as well as an empty array, is an empty sequence
    pooled = pooled_from_embeddings(minilm, seqs, batch_size=2)
    assert pooled.shape == (len(seqs), minilm.model.config.hidden_size) and pooled.dtype == np.float32
    for got, seq in zip(pooled, seqs):
        want = hidden_alone(minilm, np.asarray(seq, dtype=np.float32)[:MAX_TOKENS]).mean(axis=0)
        np.testing.assert_allclose(got, want, atol=2e-5)


def test_contextual_states_match_each_window_alone(ctx):
    from rapt_audit.attacks._token_views import CONTEXT_WINDOW, TokenView, contextual_states

    model = ctx.encoder()
    rng = np.random.default_rng(1)
    lengths = [CONTEXT_WINDOW + 5, 0, 4]  # two windows (510 + 5), an empty release, a short one
    views = []
    for i, n in enumerate(lengths):
        ids = np.arange(n, dtype=np.int64)
        views.append(TokenView(str(i), ids, ids, None,
                               rng.normal(scale=0.05, size=(n, model.dim)).astype(np.float32), ids))
    states = contextual_states(views, ctx=ctx, batch_size=2)
    assert [s.shape for s in states] == [(n, model.model.config.hidden_size) for n in lengths]
    for view, got in zip(views, states):
        vectors = view.released_vectors
        for start in range(0, len(vectors), CONTEXT_WINDOW):
            want = hidden_alone(model, vectors[start:start + CONTEXT_WINDOW])[1:-1]
            np.testing.assert_allclose(got[start:start + CONTEXT_WINDOW], want, atol=2e-5)

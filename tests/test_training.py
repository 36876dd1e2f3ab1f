"""The one training loop (rapt_audit.utility.training): it learns, selects epochs, and reproduces."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rapt_audit.encoder.models import one_thread  # noqa: E402
from rapt_audit.utility.training import (  # noqa: E402
    DeviceSum,
    EarlyStopping,
    Epochs,
    adam,
    fit,
    shuffled,
    shuffled_even,
    supervised_loss,
    to_device,
)


@pytest.fixture(autouse=True)
def _single_thread():
    """Tiny networks on shared cores: one torch thread (spinning worker threads are many times slower)."""
    with one_thread("cpu"):
        yield


def _problem(n: int = 200, d: int = 5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype(np.float32)
    return x, (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.int64)


def _net(d: int = 5, dropout: float = 0.0) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(d, 16), torch.nn.ReLU(), torch.nn.Dropout(dropout),
                               torch.nn.Linear(16, 2))


def _weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _train(seed: int, *, epochs: int = 5) -> tuple[torch.nn.Module, list[float]]:
    x, y = _problem()
    torch.manual_seed(seed)
    model = _net(dropout=0.3)
    criterion = supervised_loss(model, x, y, torch.nn.functional.cross_entropy, device="cpu")
    losses: list[float] = []

    def loss(idx: np.ndarray) -> torch.Tensor:
        value = criterion(idx)
        losses.append(float(value.detach()))
        return value

    fit(model, loss=loss, batches=shuffled(len(x), 32, rng=np.random.default_rng(seed)),
        optimizer=torch.optim.Adam(model.parameters(), lr=1e-2), stop=Epochs(epochs))
    return model, losses


def test_the_loss_falls_on_a_separable_problem_and_the_model_ends_in_eval_mode():
    model, losses = _train(0, epochs=8)
    per_epoch = np.array(losses).reshape(8, -1).mean(axis=1)  # 200 / 32 -> 7 batches an epoch
    assert per_epoch[-1] < 0.5 * per_epoch[0]
    assert not model.training
    x, y = _problem(seed=1)
    with torch.no_grad():
        accuracy = float((model(torch.as_tensor(x)).argmax(1).numpy() == y).mean())
    assert accuracy > 0.9


def test_same_seed_gives_the_same_weights_and_another_seed_does_not():
    first, first_losses = _train(3)
    again, again_losses = _train(3)
    other, _ = _train(4)
    assert _same(_weights(first), _weights(again)) and first_losses == again_losses
    assert not _same(_weights(first), _weights(other))


def _scripted(scores: list[float], *, patience: int | None, untrained: bool,
              maximize: bool = True) -> tuple[torch.nn.Module, object, list[dict[str, torch.Tensor]]]:
    """Train with a validation score that returns ``scores`` in turn; keep the weights it saw each time."""
    x, y = _problem()
    torch.manual_seed(0)
    model = _net()
    seen: list[dict[str, torch.Tensor]] = []
    replies = iter(scores)

    def score(m: torch.nn.Module) -> float:
        assert not m.training  # scored in eval mode
        seen.append(_weights(m))
        return next(replies)

    outcome = fit(model, loss=supervised_loss(model, x, y, torch.nn.functional.cross_entropy, device="cpu"),
                  batches=shuffled(len(x), 50, rng=np.random.default_rng(0)),
                  optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                  stop=EarlyStopping(10, score, maximize=maximize, patience=patience, untrained=untrained))
    return model, outcome, seen


def test_early_stopping_restores_the_best_epoch_after_patience_runs_out():
    model, outcome, seen = _scripted([0.5, 0.6, 0.9, 0.7, 0.8, 1.0], patience=2, untrained=True)
    assert outcome.scores == [0.5, 0.6, 0.9, 0.7, 0.8]  # epochs 0..4: two without improvement after epoch 2
    assert (outcome.best_epoch, outcome.best_score, outcome.epochs_run) == (2, 0.9, 4)
    assert _same(_weights(model), seen[2]) and not _same(_weights(model), seen[4])


def test_an_untrained_model_that_training_never_beats_is_kept():
    model, outcome, seen = _scripted([0.5, 0.5, 0.4], patience=2, untrained=True)
    assert outcome.best_epoch == 0 and outcome.epochs_run == 2
    assert _same(_weights(model), seen[0])


def test_without_patience_every_epoch_runs_and_the_first_best_is_kept_when_minimising():
    scores = [3.0, 2.0, 2.0, 1.0, 1.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    model, outcome, seen = _scripted(scores, patience=None, untrained=False, maximize=False)
    assert outcome.epochs_run == 10 and outcome.scores == scores  # from epoch 1: no untrained candidate
    assert outcome.best_epoch == 4 and _same(_weights(model), seen[3])


def test_a_known_untrained_score_is_not_evaluated_and_none_losses_take_no_step():
    torch.manual_seed(0)
    model = _net()
    before = _weights(model)
    calls: list[int] = []

    def score(_m: torch.nn.Module) -> float:
        calls.append(1)
        return 1.0

    outcome = fit(model, loss=lambda idx: None, batches=shuffled(10, 3, rng=np.random.default_rng(0)),
                  optimizer=torch.optim.SGD(model.parameters(), lr=1.0),
                  stop=EarlyStopping(3, score, maximize=False, untrained=True, untrained_score=0.5),
                  end_epoch=lambda epoch: epoch * 10)
    assert len(calls) == 3 and outcome.scores == [0.5, 1.0, 1.0, 1.0]
    assert outcome.best_epoch == 0 and outcome.history == [10, 20, 30]
    assert _same(_weights(model), before)


@pytest.mark.parametrize("batches, sizes", [(shuffled, [4, 4, 2]), (shuffled_even, [4, 3, 3])])
def test_batches_cover_every_index_once_in_a_fresh_seeded_order(batches, sizes):
    epoch = batches(10, 4, rng=np.random.default_rng(7))
    first, second = list(epoch()), list(epoch())
    for drawn in (first, second):
        assert [len(b) for b in drawn] == sizes
        assert sorted(np.concatenate(drawn).tolist()) == list(range(10))
    assert not np.array_equal(np.concatenate(first), np.concatenate(second))
    replay = batches(10, 4, rng=np.random.default_rng(7))
    assert all(np.array_equal(a, b) for a, b in zip(first, replay()))


def test_one_thread_with_a_seed_draws_from_the_seed_and_restores_the_global_state():
    torch.manual_seed(11)
    expected_next = torch.rand(3)
    torch.manual_seed(11)
    threads = torch.get_num_threads()
    with one_thread("cpu", seed=5):
        assert torch.get_num_threads() == 1
        inside = torch.rand(3)
    assert torch.get_num_threads() == threads
    assert torch.equal(torch.rand(3), expected_next)  # the caller's generator is untouched
    with one_thread("cpu", seed=5):
        assert torch.equal(torch.rand(3), inside)


def test_device_sums_equal_python_float_sums_and_restart_after_each_read():
    rng = np.random.default_rng(0)
    values = torch.as_tensor(rng.normal(size=50).astype(np.float32))
    weights = rng.integers(1, 64, size=50)
    sums = DeviceSum(["loss", "count"], "cpu")
    expected = 0.0
    for value, weight in zip(values, weights):
        sums.add("loss", value, int(weight))
        sums.add("count", torch.tensor(2), 1)
        expected += float(value) * int(weight)  # what a per-step float() read summed
    assert sums.read() == {"loss": expected, "count": 100.0}
    assert sums.read() == {"loss": 0.0, "count": 0.0}


def test_to_device_on_cpu_is_the_array_itself():
    idx = np.array([4, 1, 2])
    moved = to_device(idx, "cpu")
    assert moved.tolist() == [4, 1, 2] and moved.data_ptr() == idx.__array_interface__["data"][0]


@pytest.mark.parametrize("decoupled", [False, True])
def test_the_shared_optimizer_is_fused_and_steps_as_the_per_tensor_rule(decoupled):
    """`adam` picks torch's fused kernel on CPU; its weights follow the plain loop's (Adam or AdamW)."""
    shapes = [(300, 16), (16,), (16, 4)]

    def trained(make):
        torch.manual_seed(3)
        params = [torch.nn.Parameter(torch.randn(*shape)) for shape in shapes]
        optimizer = make(params)
        grads = torch.Generator().manual_seed(4)
        for _ in range(20):
            for p in params:
                p.grad = torch.randn(p.shape, generator=grads)
            optimizer.step()
        return optimizer, params

    plain = torch.optim.AdamW if decoupled else torch.optim.Adam
    fused, ours = trained(lambda ps: adam(ps, lr=1e-2, weight_decay=0.1, decoupled=decoupled))
    _, reference = trained(lambda ps: plain(ps, lr=1e-2, weight_decay=0.1, foreach=False))
    assert isinstance(fused, plain) and fused.defaults["fused"] is True
    assert fused.defaults["weight_decay"] == 0.1
    for a, b in zip(ours, reference):
        assert torch.allclose(a, b, atol=1e-6), (a - b).abs().max()
    torch.manual_seed(3)
    assert not torch.allclose(ours[0], torch.randn(*shapes[0]), atol=1e-2)  # the steps did move the weights


def test_every_trainer_builds_its_optimizer_with_the_shared_helper():
    """A trainer that builds torch's Adam itself gets the slow per-tensor loop on CPU (see `adam`)."""
    root = Path(__file__).resolve().parents[1]
    own = [f"{path.relative_to(root)}:{n}" for folder in ("rapt_audit", "attacks", "defenses")
           for path in sorted((root / folder).rglob("*.py")) if path.name != "training.py"
           for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
           if re.search(r"torch\.optim\.(Adam|AdamW|SGD)\(", line)]
    assert not own, f"optimizers built outside rapt_audit.utility.training.adam: {own}"


def test_param_groups_keep_their_own_learning_rates():
    slow, fast = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(3))
    optimizer = adam([{"params": [slow], "lr": 1e-3}, {"params": [fast], "lr": 1e-1}])
    slow.grad, fast.grad = torch.ones(3), torch.ones(3)
    optimizer.step()
    assert torch.allclose(1 - slow.detach(), torch.full((3,), 1e-3), rtol=1e-3)
    assert torch.allclose(1 - fast.detach(), torch.full((3,), 1e-1), rtol=1e-3)

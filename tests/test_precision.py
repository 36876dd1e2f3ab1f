"""The run's precision (issue #29): bfloat16 where the hardware has it, float32 elsewhere, and where it applies.

Each test names the broken implementation it rejects: ``auto`` that ignores the CPU's flags, a
precision that changes every existing cell id, an fp32 region that an enclosing bf16 autocast leaks
into (CAPE's noise would be drawn in bfloat16), a training loop whose forward pass is not under the
run's precision, and a run that does not record the precision it used.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from rapt_audit.api.errors import UsageError
from rapt_audit.encoder import precision as prec
from rapt_audit.pipeline.config import RunConfig


def _cpuinfo(tmp_path, flags: str):
    path = tmp_path / f"cpuinfo-{abs(hash(flags))}"
    path.write_text(f"processor\t: 0\nmodel name\t: test\nflags\t\t: fpu sse2 avx2 {flags}\n\n", encoding="utf-8")
    return str(path)


def test_native_bf16_is_read_from_the_cpu_flags(tmp_path):
    assert prec.cpu_has_native_bf16(_cpuinfo(tmp_path, "avx512f avx512_bf16"))
    assert prec.cpu_has_native_bf16(_cpuinfo(tmp_path, "amx_tile amx_bf16"))
    assert not prec.cpu_has_native_bf16(_cpuinfo(tmp_path, "avx512f avx512_vnni"))


@pytest.mark.parametrize("native, expected", [(True, "bf16"), (False, "fp32")])
def test_auto_follows_the_cpu_and_an_explicit_choice_wins(monkeypatch, native, expected):
    monkeypatch.setattr(prec, "cpu_has_native_bf16", lambda: native)
    assert prec.resolve_precision("auto", "cpu") == expected
    assert prec.resolve_precision("fp32", "cpu") == "fp32"
    assert prec.resolve_precision("bf16", "cpu") == "bf16"
    with pytest.raises(ValueError, match="'fp16' is not one of auto, fp32, bf16"):
        prec.resolve_precision("fp16", "cpu")


def test_auto_keeps_every_existing_cell_id_and_an_explicit_precision_is_another_cell():
    config = RunConfig(defense="t2t", defense_args={"eta": 75})
    data = {k: v for k, v in config.to_dict().items()
            if k not in {"out", "force", "device", "data_dir", "release_cache", "precision", "attack_timeout",
                         "service_model"}}  # written before both settings existed (service_model: issue #63)
    before = hashlib.sha256(json.dumps(data, sort_keys=True).encode("utf-8")).hexdigest()[:12]
    assert config.spelling_id() == before  # the id a result written before the setting existed carries
    assert config.matches(data)  # and that result is still this run
    ids = {RunConfig(defense="t2t", defense_args={"eta": 75}, precision=p).cell_id() for p in ("fp32", "bf16")}
    assert len(ids) == 2 and config.cell_id() not in ids
    with pytest.raises(UsageError, match="precision='half' is not one of auto, fp32, bf16"):
        RunConfig(precision="half")


def test_fp32_inside_a_bf16_region_is_float32():
    import torch

    from rapt_audit.utility.on_device import autocast

    a = torch.randn(8, 8)
    with autocast("cpu", "bf16"):
        assert (a @ a).dtype == torch.bfloat16
        with autocast("cpu", "fp32"):
            assert (a @ a).dtype == torch.float32


@pytest.mark.parametrize("precision, dtype", [("fp32", "float32"), ("bf16", "bfloat16")])
def test_the_training_loop_runs_forward_passes_and_validation_in_the_given_precision(precision, dtype):
    import torch

    from rapt_audit.utility.on_device import autocast
    from rapt_audit.utility.training import EarlyStopping, fit, shuffled

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    x, y = torch.randn(32, 4), torch.randint(0, 2, (32,))
    seen: dict[str, set] = {"loss": set(), "score": set()}

    def loss(idx):
        out = model(x[idx])
        seen["loss"].add(str(out.dtype))
        return torch.nn.functional.cross_entropy(out, y[idx])

    def score(m):
        seen["score"].add(str(m(x).dtype))
        return 0.0

    fit(model, loss=loss, batches=shuffled(32, 8, rng=np.random.default_rng(0)),
        optimizer=torch.optim.SGD(model.parameters(), lr=0.1), stop=EarlyStopping(2, score),
        autocast=lambda: autocast("cpu", precision))
    assert seen == {"loss": {f"torch.{dtype}"}, "score": {f"torch.{dtype}"}}
    assert model.weight.dtype == torch.float32  # mixed precision: the weights stay float32


def test_length_batches_cover_every_row_once_an_epoch_and_cut_padding():
    from rapt_audit.utility.training import length_batches, shuffled

    lengths = np.random.default_rng(1).integers(5, 60, size=400)
    batches = length_batches(lengths, 16, rng=np.random.default_rng(0))
    first, second = batches(), batches()
    for epoch in (first, second):
        assert sorted(np.concatenate(epoch).tolist()) == list(range(400))
    assert [b.tolist() for b in first] != [b.tolist() for b in second]  # a fresh order each epoch

    def padded(epoch):
        return sum(len(b) * int(lengths[b].max()) for b in epoch)

    random = shuffled(400, 16, rng=np.random.default_rng(0))()
    assert padded(first) < 0.75 * padded(random)  # measured here: about 0.6 of the positions


def test_a_run_records_the_precision_its_networks_used(warm_cache, tmp_path, monkeypatch):
    from rapt_audit.pipeline.runner import compute

    monkeypatch.setenv("RAPT_AUDIT_CACHE", str(warm_cache))
    result = compute(RunConfig(defense="t2t", attacks="random_guess", profile="smoke", dataset="synthetic",
                               precision="bf16", defense_args={"eta": 75, "method": "prompt", "epochs": 1},
                               data_args={"victim_train": 30, "victim_test": 20, "attacker_train": 30,
                                          "attacker_valid": 20}))  # what is recorded, not the numbers
    assert result.env["precision"] == "bf16"
    assert result.defense["release_meta"]["customization"]["settings"]["precision"] == "bf16"

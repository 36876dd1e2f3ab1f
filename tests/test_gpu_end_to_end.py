"""The whole audit on a CUDA device (``gpu`` marker: skipped where torch sees no CUDA device).

The first thing a session with a GPU runs (``pytest -m gpu``, with ``RAPT_AUDIT_DATA`` set: the run is
on SST-2): every stage of the main command on the device, its GPU use recorded per stage, and the
customization in both precisions, each learning the task.
"""

from __future__ import annotations

import json
import math

import pytest

from rapt_audit.cli import main
from tests.chance import victim_test_majority

pytestmark = pytest.mark.gpu


def _result(path):
    return json.loads((path / "result.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_main_command_runs_on_cuda_and_records_its_gpu_use(tmp_path, precision, data_dir):
    """On SST-2 with 1,000 training and 400 test sentences: at the smoke profile RAPT learns the task
    there (on CPU in fp32: 0.695 [0.65, 0.74] against a majority share of 0.53), while on the synthetic
    corpus it stays at the majority share (0.54 [0.47, 0.62] against 0.54 with 300 training records)."""
    out = tmp_path / precision
    assert main(["run", "--defense", "rapt", "--attacks", "all", "--profile", "smoke", "--device", "cuda",
                 "--dataset", "sst2", "--data-dir", str(data_dir), "--set", "data.victim_train=1000",
                 "--set", "data.victim_test=400", "--set", f"precision={precision}", "--out", str(out),
                 "--quiet"]) == 0
    result = _result(out)
    assert result["env"]["device"] == "cuda"
    gpu = result["env"]["gpu"]
    assert gpu["sampled"] is True, gpu
    assert set(gpu["stages"]) == set(result["env"]["timings_s"])
    assert gpu["stages"]["defense.utility"]["torch_peak_allocated_mib"] > 0
    accuracy, majority = result["utility"]["accuracy"], victim_test_majority(result["config"])
    assert accuracy["ci_low"] > majority, (accuracy, majority)  # customized in this precision, it learned
    ran = {name: a for name, a in result["attacks"].items() if "skipped" not in a}
    assert {"whitebox", "mlp_inversion", "ae_inversion", "ner", "ner_adaptive"} <= set(ran)
    for name, attack in ran.items():
        assert math.isfinite(attack["empirical_privacy"]["value"]), name

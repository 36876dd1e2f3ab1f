"""The whole audit on a CUDA device (``gpu`` marker: skipped where torch sees no CUDA device).

The first thing a session with a GPU runs (``pytest -m gpu``): every stage of the main command on
the device, its GPU use recorded per stage, and the customization in both precisions.
"""

from __future__ import annotations

import json
import math

import pytest

from rapt_audit.cli import main

pytestmark = pytest.mark.gpu


def _result(path):
    return json.loads((path / "result.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_main_command_runs_on_cuda_and_records_its_gpu_use(tmp_path, precision):
    out = tmp_path / precision
    assert main(["run", "--defense", "rapt", "--attacks", "all", "--profile", "smoke", "--device", "cuda",
                 "--set", f"precision={precision}", "--out", str(out), "--quiet"]) == 0
    result = _result(out)
    assert result["env"]["device"] == "cuda"
    gpu = result["env"]["gpu"]
    assert gpu["sampled"] is True, gpu
    assert set(gpu["stages"]) == set(result["env"]["timings_s"])
    assert gpu["stages"]["defense.utility"]["torch_peak_allocated_mib"] > 0
    assert 0.5 <= result["utility"]["accuracy"]["value"] <= 1.0
    ran = {name: a for name, a in result["attacks"].items() if "skipped" not in a}
    assert {"whitebox", "mlp_inversion", "ae_inversion", "ner", "ner_adaptive"} <= set(ran)
    for name, attack in ran.items():
        assert math.isfinite(attack["empirical_privacy"]["value"]), name

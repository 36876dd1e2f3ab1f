"""GPU use per stage in a result's provenance (``env.gpu``, issue #12), without a GPU.

A fake ``nvidia-smi`` written into a temporary folder on PATH answers scripted readings, so the
parsing, the attribution of each reading to the stage that ran and the summary figures are checked
exactly; NVML is checked through a fake ``pynvml``. One ``gpu`` test samples a real CUDA device.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import threading
import time
import types
from contextlib import contextmanager
from pathlib import Path

import pytest

from rapt_audit import RunConfig
from rapt_audit.api.errors import ResultError
from rapt_audit.pipeline import gpu_usage, runner
from rapt_audit.pipeline.gpu_usage import THREAD_NAME, gpu_ids, monitor, open_monitor
from rapt_audit.pipeline.result_schema import validate_result_document
from rapt_audit.reporting.collect import Loaded
from rapt_audit.reporting.sections import gpu_use_html, provenance_html
from rapt_audit.reporting.summary import group_results
from tests.result_factory import fake_result

SMI_ONLY = ("nvidia-smi",)
#: Answers ``--query-gpu=name`` for the ids it knows, and the scripted readings one per call; then repeats
#: the last one or fails. Every call's arguments go to calls.log.
FAKE_SMI = '''#!{python} -S
import json, pathlib, sys
here = pathlib.Path(__file__).parent
spec = json.loads((here / "spec.json").read_text())
with open(here / "calls.log", "a") as log:
    log.write(" ".join(sys.argv[1:]) + "\\n")
gpu = sys.argv[sys.argv.index("-i") + 1]
if gpu not in spec["ids"]:
    sys.stderr.write("No devices were found\\n")
    sys.exit(6)
if sys.argv[1] == "--query-gpu=name":
    print(spec["name"])
    sys.exit(0)
import fcntl
with open(here / "lock", "w") as lock:  # the sampler thread and a test may ask at once
    fcntl.flock(lock, fcntl.LOCK_EX)
    count = here / "count"
    n = int(count.read_text()) if count.exists() else 0
    count.write_text(str(n + 1))
readings = spec["readings"]
if n >= len(readings) and spec["after"] == "fail":
    sys.stderr.write("fake failure\\n")
    sys.exit(9)
print(readings[min(n, len(readings) - 1)])
'''


class FakeSmi:
    """The fake executable's folder: its script, how often it was asked for readings, and its calls."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def script(self, readings: list[str], *, ids: tuple[str, ...] = ("GPU-fake",), after: str = "repeat") -> None:
        (self.folder / "spec.json").write_text(json.dumps({"ids": list(ids), "name": "Fake H100", "readings": readings,
                                                           "after": after}))

    @property
    def readings_served(self) -> int:
        count = self.folder / "count"
        return int(count.read_text()) if count.exists() else 0

    @property
    def calls(self) -> list[str]:
        log = self.folder / "calls.log"
        return log.read_text().splitlines() if log.exists() else []


@pytest.fixture
def smi(tmp_path, monkeypatch) -> FakeSmi:
    folder = tmp_path / "bin"
    folder.mkdir()
    exe = folder / "nvidia-smi"
    exe.write_text(FAKE_SMI.format(python=sys.executable))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ.get('PATH', '')}")
    return FakeSmi(folder)


class FakePeaks:
    """Torch's peak allocated memory, scripted: each stage's peak is the next value, after a reset."""

    def __init__(self, peaks: list[float]) -> None:
        self.peaks, self.resets, self.reads = peaks, 0, 0

    def reset(self) -> None:
        self.resets += 1

    def peak_mib(self) -> float:
        assert self.resets == self.reads + 1, "a stage's peak is read once, after its own reset"
        self.reads += 1
        return self.peaks[(self.reads - 1) % len(self.peaks)]


def _sampler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == THREAD_NAME]


def test_gpu_ids_name_torch_device_by_uuid_then_by_the_machine_index():
    assert gpu_ids("58d4-ab", 1, "3,5") == ["GPU-58d4-ab", "5"]  # torch's 1 is the machine's 5
    assert gpu_ids("", 0, None) == ["0"]
    assert gpu_ids("MIG-1c2d", 0, "MIG-1c2d") == ["MIG-1c2d"]
    assert gpu_ids("GPU-aa", 0, " GPU-bb , 2") == ["GPU-aa", "GPU-bb"]


def test_each_reading_counts_for_the_stage_that_ran_and_the_summary_is_exact(smi):
    smi.script(["0, 500", "50, 1000", "100, 3000", "20, 800", "0, 700", "40, 900"])
    peaks = FakePeaks([100.0, 250.0])
    gpu = open_monitor(["GPU-fake"], peaks=peaks, sources=SMI_ONLY)  # not entered: no thread, samples by hand
    assert gpu.sample_once()  # before any stage: counts in the whole run only
    with gpu.stage("defense.fit"):
        assert gpu.sample_once() and gpu.sample_once()
    with gpu.stage("attack.x"):
        assert gpu.sample_once() and gpu.sample_once()
    with gpu.stage("defense.release"):
        pass
    assert gpu.sample_once()
    summary = gpu.summary()
    assert summary == {
        "sampled": True, "source": "nvidia-smi", "interval_s": 0.5, "name": "Fake H100", "id": "GPU-fake",
        "error": None, "samples": 6, "utilization_mean_pct": 35.0, "busy_share": 0.667, "memory_used_peak_mib": 3000.0,
        "stages": {
            "defense.fit": {"samples": 2, "utilization_mean_pct": 75.0, "busy_share": 1.0,
                            "memory_used_peak_mib": 3000.0, "torch_peak_allocated_mib": 100.0},
            "attack.x": {"samples": 2, "utilization_mean_pct": 10.0, "busy_share": 0.5, "memory_used_peak_mib": 800.0,
                         "torch_peak_allocated_mib": 250.0},
            "defense.release": {"samples": 0, "utilization_mean_pct": None, "busy_share": None,
                                "memory_used_peak_mib": None, "torch_peak_allocated_mib": 100.0}}}
    assert smi.calls[0] == "--query-gpu=name --format=csv,noheader,nounits -i GPU-fake"
    assert set(smi.calls[1:]) == {"--query-gpu=utilization.gpu,memory.used --format=csv,noheader,nounits -i GPU-fake"}
    validate_result_document({**fake_result().to_dict(), "env": {"gpu": summary}}, "sampled")


def test_the_machine_index_is_asked_when_nvidia_smi_does_not_know_the_uuid(smi):
    smi.script(["7, 64"], ids=("5",))
    gpu = open_monitor(["GPU-unknown", "5"], sources=SMI_ONLY)
    assert gpu.sample_once()
    summary = gpu.summary()
    assert (summary["id"], summary["samples"], summary["utilization_mean_pct"]) == ("5", 1, 7.0)
    smi.script(["7, 64"], ids=("9",))
    lost = open_monitor(["GPU-unknown", "5"], name="torch's name", peaks=FakePeaks([1.0]), sources=SMI_ONLY).summary()
    assert lost["sampled"] is False and lost["name"] == "torch's name" and lost["source"] is None
    assert "nvidia-smi -i GPU-unknown" in lost["reason"] and "nvidia-smi -i 5" in lost["reason"]
    assert "No devices were found" in lost["reason"] and lost["error"] == lost["reason"]


@pytest.mark.parametrize(("readings", "after", "message"), [
    (["30, 100", "[N/A], [N/A]"], "repeat", "cannot read nvidia-smi's '[N/A], [N/A]'"),
    (["30, 100", "30, 100, 5"], "repeat", "as 'utilization %, memory MiB'"),
    (["30, 100", "130, 100"], "repeat", "implausible reading '130, 100'"),
    (["30, 100"], "fail", "exited with 9 and printed 0 line(s), not 1: 'fake failure'"),
])
def test_a_source_that_breaks_is_recorded_once_and_sampling_stops(smi, readings, after, message):
    smi.script(readings, after=after)
    gpu = open_monitor(["GPU-fake"], sources=SMI_ONLY)
    with gpu.stage("defense.fit"):
        assert gpu.sample_once() and not gpu.sample_once()
        assert not gpu.sample_once()  # no retry: the source is not asked again
    assert smi.readings_served == 2
    summary = gpu.summary()
    assert summary["sampled"] is True and summary["samples"] == 1 and summary["stages"]["defense.fit"]["samples"] == 1
    assert summary["error"].startswith("nvidia-smi stopped after 1 sample(s): ") and message in summary["error"]


def test_a_source_that_fails_its_first_reading_samples_nothing_and_says_why(smi):
    """No waiting on the clock: the sampler reads once before it first looks at the stop flag, and leaving
    the block joins it, so its first (failing) reading has been taken when the block ends."""
    smi.script(["not a number"])
    gpu = open_monitor(["GPU-fake"], sources=SMI_ONLY)
    with gpu:
        with gpu.stage("defense.fit"):
            pass
    assert smi.readings_served == 1  # asked once, never again after it broke
    summary = gpu.summary()
    assert summary["sampled"] is False and summary["samples"] == 0
    assert summary["reason"] == summary["error"] and "'not a number'" in summary["reason"]
    validate_result_document({**fake_result().to_dict(), "env": {"gpu": summary}}, "failed")


def test_no_source_at_all_is_recorded_and_the_run_goes_on(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi; pynvml missing or not asked
    monkeypatch.setattr(gpu_usage, "pynvml", None)
    peaks = FakePeaks([12.5])
    with open_monitor(["GPU-x", "0"], name="H100", peaks=peaks) as gpu:
        assert gpu._thread is None
        with gpu.stage("defense.fit"):
            pass
    summary = gpu.summary()
    assert summary["reason"] == ("no GPU sampling source started (nvml: pynvml (nvidia-ml-py) is not installed; "
                                 "nvidia-smi: nvidia-smi is not on PATH)")
    assert summary["stages"] == {"defense.fit": {"samples": 0, "utilization_mean_pct": None, "busy_share": None,
                                                 "memory_used_peak_mib": None, "torch_peak_allocated_mib": 12.5}}


class _Ticks(threading.Event):
    """The sampler's stop flag, counting instead of waiting: its pauses between readings answer "not
    stopped" until ``readings`` readings are taken, whatever the clock says, then "stopped". With
    ``pace`` each pause lasts its interval (so that readings spread over a computation), without it none."""

    def __init__(self, readings: int, *, pace: bool = False) -> None:
        super().__init__()
        self.readings, self.pace, self.pauses = readings, pace, []

    def wait(self, timeout: float | None = None) -> bool:
        self.pauses.append(timeout)
        if self.pace:
            time.sleep(timeout or 0)
        return len(self.pauses) >= self.readings


def test_the_sampler_thread_is_a_daemon_and_stops_however_the_block_ends(smi, monkeypatch):
    smi.script(["60, 2048", "0, 1024"])
    gpu = open_monitor(["GPU-fake"], sources=SMI_ONLY, interval_s=0.005)
    ticks = _Ticks(readings=3)
    monkeypatch.setattr(gpu, "_stop", ticks)  # three readings, paced by count: no deadline to miss
    with pytest.raises(RuntimeError, match="the stage failed"):
        with gpu.stage("defense.fit"), gpu:
            (thread,) = _sampler_threads()
            assert thread.daemon
            raise RuntimeError("the stage failed")
    assert not thread.is_alive() and not _sampler_threads()  # joined when the block ended
    assert ticks.pauses == [0.005] * 3  # the interval between readings, then the stop is seen
    assert smi.readings_served == 3  # and nothing asked after it
    summary = gpu.summary()
    assert smi.readings_served == 3
    assert summary["samples"] == summary["stages"]["defense.fit"]["samples"] == 3
    assert summary["memory_used_peak_mib"] == 2048.0 and summary["utilization_mean_pct"] == 20.0  # 60, 0, 0


def _fake_pynvml(calls: list[str]) -> types.SimpleNamespace:
    class NVMLError(Exception):
        pass

    def by_uuid(uuid):
        calls.append(f"uuid {uuid!r}")
        if uuid != b"GPU-abc":
            raise NVMLError("Not Found")
        return "handle"

    readings = iter([(35, 3 * 2**20), (0, 2**20)])

    def utilization(handle):
        try:
            gpu, used = next(readings)
        except StopIteration:
            raise NVMLError("GPU is lost") from None
        utilization.used = used
        return types.SimpleNamespace(gpu=gpu)

    return types.SimpleNamespace(
        NVMLError=NVMLError, nvmlInit=lambda: calls.append("init"), nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetHandleByUUID=by_uuid, nvmlDeviceGetHandleByIndex=lambda i: calls.append(f"index {i}"),
        nvmlDeviceGetName=lambda handle: b"NVIDIA H100 80GB HBM3", nvmlDeviceGetUtilizationRates=utilization,
        nvmlDeviceGetMemoryInfo=lambda handle: types.SimpleNamespace(used=utilization.used))


def test_nvml_comes_first_when_importable_and_is_shut_down_once(smi, monkeypatch):
    smi.script(["99, 99"])
    calls: list[str] = []
    monkeypatch.setattr(gpu_usage, "pynvml", _fake_pynvml(calls))
    gpu = open_monitor(["GPU-abc", "0"])
    with gpu.stage("attack.mlp"):
        assert gpu.sample_once() and gpu.sample_once() and not gpu.sample_once()
    gpu.stop()
    summary = gpu.summary()
    assert calls == ["init", "uuid b'GPU-abc'", "shutdown"] and smi.calls == []
    assert (summary["source"], summary["name"], summary["id"]) == ("nvml", "NVIDIA H100 80GB HBM3", "GPU-abc")
    assert summary["stages"]["attack.mlp"] == {"samples": 2, "utilization_mean_pct": 17.5, "busy_share": 0.5,
                                               "memory_used_peak_mib": 3.0, "torch_peak_allocated_mib": None}
    assert summary["error"] == "nvml stopped after 2 sample(s): NVML: GPU is lost"


def test_a_cpu_monitor_starts_no_thread_and_says_nothing_was_sampled():
    with monitor("cpu") as gpu, gpu.stage("defense.fit"):
        assert gpu._thread is None and not _sampler_threads()
    assert gpu.summary() == {"sampled": False, "reason": "the run's device is cpu: no GPU was sampled"}


def _run(seed: int):
    return runner.compute(RunConfig(defense="identity", attacks="random_guess", dataset="synthetic", profile="smoke",
                                    device="cpu", seed=seed))


def test_a_cpu_run_records_that_no_gpu_was_sampled(monkeypatch):
    def no_thread(*_a, **_k):
        raise AssertionError("a CPU run must not start a sampler thread")

    monkeypatch.setattr(gpu_usage, "Thread", no_thread)
    result = _run(seed=1)
    assert result.env["gpu"] == {"sampled": False, "reason": "the run's device is cpu: no GPU was sampled"}
    validate_result_document(result.to_dict(), "cpu run")


def test_the_runner_attributes_samples_to_its_timed_stages(smi, monkeypatch, tmp_path):
    smi.script(["80, 4096"])
    peaks = FakePeaks([64.0])
    gpu = open_monitor(["GPU-fake"], peaks=peaks, sources=SMI_ONLY, interval_s=0.005)
    stage = gpu.stage

    @contextmanager
    def sampled_stage(name):  # one reading inside every stage, whatever the thread's timing
        with stage(name):
            gpu.sample_once()
            yield

    monkeypatch.setattr(gpu, "stage", sampled_stage)
    monkeypatch.setattr(runner, "gpu_monitor", lambda device: gpu)
    result = _run(seed=2)
    recorded, timings = result.env["gpu"], result.env["timings_s"]
    assert not _sampler_threads()
    assert list(recorded["stages"]) == list(timings) and peaks.reads == len(timings)
    assert recorded["error"] is None and all(figures["samples"] >= 1 for figures in recorded["stages"].values())
    assert recorded["sampled"] is True and recorded["samples"] >= sum(s["samples"] for s in recorded["stages"].values())
    assert (recorded["utilization_mean_pct"], recorded["busy_share"], recorded["memory_used_peak_mib"]) == (80.0, 1.0,
                                                                                                       4096.0)
    validate_result_document(result.to_dict(), "sampled run")
    page = provenance_html(group_results([Loaded(tmp_path / "r" / "result.json", result)])[0], tmp_path)
    assert "GPU use of <code>r/result.json</code>: Fake H100 (nvidia-smi every 0.005 s)" in page
    assert "<tr><td>defense.utility</td>" in page and "<td class='num'>4096</td><td class='num'>64</td>" in page


def test_results_without_gpu_use_stay_valid_and_bad_gpu_use_is_refused():
    old = fake_result().to_dict()
    assert "gpu" not in old["env"]
    validate_result_document(old, "old")
    for bad, field in (({"sampled": False}, "'reason' is a required property"),
                       ({"sampled": True, "busy_share": 1.5}, "env.gpu.busy_share"),
                       ({"sampled": True, "stages": {"x": {"samples": -1}}}, "env.gpu.stages.x.samples"),
                       ({"sampled": "yes", "reason": "r"}, "env.gpu.sampled")):
        with pytest.raises(ResultError, match=field.replace(".", r"\.").replace("(", r"\(")):
            validate_result_document({**old, "env": {**old["env"], "gpu": bad}}, "bad")


def test_the_report_shows_gpu_use_per_stage_escaped_and_nothing_for_a_cpu_run():
    evil = "<script>alert(1)</script>"
    env = {"wall_time_s": 3.5, "timings_s": {"defense.fit": 1.25, evil: 2.0},
           "gpu": {"sampled": True, "source": "nvml", "interval_s": 0.5, "name": evil, "id": "GPU-x", "error": evil,
                   "samples": 7, "utilization_mean_pct": 81.4, "busy_share": 0.857, "memory_used_peak_mib": 5000.0,
                   "stages": {"defense.fit": {"samples": 2, "utilization_mean_pct": 90.0, "busy_share": 1.0,
                                              "memory_used_peak_mib": 5000.0, "torch_peak_allocated_mib": 1234.4}}}}
    page = gpu_use_html(evil, env)
    assert "<script" not in page and page.count("&lt;script&gt;") == 4  # label, name, error, stage
    assert "nvml every 0.5 s): mean utilisation 81.4 %, busy in 86% of samples" in page
    assert ("<tr><td>defense.fit</td><td class='num'>1.250</td><td class='num'>2</td><td class='num'>90.0</td>"
            "<td class='num'>100%</td><td class='num'>5000</td><td class='num'>1234</td></tr>") in page
    assert "<td>&lt;script&gt;alert(1)&lt;/script&gt;</td><td class='num'>2.000</td><td class='num'>–</td>" in page
    assert "<tr><td><b>whole run</b></td><td class='num'>3.500</td><td class='num'>7</td>" in page
    assert gpu_use_html("cpu", {"gpu": {"sampled": False, "reason": "the run's device is cpu"}}) == ""
    assert gpu_use_html("old", {"timings_s": {"defense.fit": 1.0}}) == ""


@pytest.mark.gpu
def test_a_real_cuda_device_is_sampled_while_it_computes(monkeypatch):
    """The device computes until the sampler has taken its 5 readings (counted, no deadline); CUDA is
    started before the sampler, so that the readings fall on the computation, not on its set-up."""
    import torch

    x = torch.randn(4096, 4096, device="cuda")
    torch.cuda.synchronize()
    gpu = monitor("cuda", interval_s=0.05)
    monkeypatch.setattr(gpu, "_stop", _Ticks(readings=5, pace=True))
    with gpu.stage("matmul"), gpu:
        (thread,) = _sampler_threads()
        while thread.is_alive():
            for _ in range(20):
                x = torch.tanh(x @ x)
            torch.cuda.synchronize()
    summary = gpu.summary()
    stage = summary["stages"]["matmul"]
    assert summary["error"] is None and summary["name"] == torch.cuda.get_device_name()
    assert stage["samples"] >= 5 and stage["busy_share"] > 0 and stage["memory_used_peak_mib"] > 0
    assert stage["torch_peak_allocated_mib"] >= 64  # x and x @ x: 2 × 64 MiB

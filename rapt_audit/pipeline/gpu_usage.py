"""GPU use sampled while a run executes, attributed to the runner's stages: a result's ``env.gpu`` (issue #12).

On a CUDA run, :func:`monitor` samples the run's GPU every :data:`SAMPLE_INTERVAL_S` seconds in a
daemon thread: utilisation (%) and memory used (MiB), read through NVML (``pynvml``, the package
nvidia-ml-py) when it is importable, else from the ``nvidia-smi`` executable. The runner wraps each
stage in :meth:`GpuMonitor.stage`; a sample belongs to the stage that is running when the reading
comes back (samples between stages count only in the overall figures). Each stage also records
torch's peak allocated memory (``torch.cuda.max_memory_allocated`` after a reset at its start).

``env.gpu`` (typed in ``result.schema.json``; absent from results written before it existed)::

    {"sampled": false, "reason": "the run's device is cpu: no GPU was sampled"}     a CPU run: no thread

    a CUDA run:
    {"sampled": true, "source": "nvml" | "nvidia-smi", "interval_s": 0.5, "name": "NVIDIA H100 ...",
     "id": "GPU-<uuid>" (or the index), "error": null | "why sampling stopped early",
     "samples": N, "utilization_mean_pct": ..., "busy_share": ..., "memory_used_peak_mib": ...,
     "stages": {"defense.fit": {"samples": n, "utilization_mean_pct": ..., "busy_share": ...,
                                "memory_used_peak_mib": ..., "torch_peak_allocated_mib": ...}, ...}}

``busy_share`` is the share of samples whose utilisation is above 0 %. A source that fails is
recorded once, as ``error``, and sampling stops; the run goes on. A CUDA run with no sample at all
(no source started, or the first reading failed) has the same keys with ``"sampled": false``,
``reason`` (the error), null figures and, per stage, still torch's peak allocated memory.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import warnings
from contextlib import contextmanager
from threading import Event, Lock, Thread
from typing import Any, Iterator, Protocol, Sequence

with warnings.catch_warnings():  # the old ``pynvml`` distribution warns on import that it is deprecated
    warnings.simplefilter("ignore", FutureWarning)
    try:  # optional: nvidia-ml-py; without it, nvidia-smi is asked instead
        import pynvml
    except ImportError:
        pynvml = None  # type: ignore[assignment]

SAMPLE_INTERVAL_S = 0.5
SOURCES = ("nvml", "nvidia-smi")
SMI_TIMEOUT_S = 10.0  # a wedged driver must not hang the sampler (the thread is a daemon all the same)
THREAD_NAME = "rapt-audit-gpu-sampler"
MIB = 2**20


class SourceError(RuntimeError):
    """A sampling source that cannot start or stopped answering; its message goes into the provenance."""


class Source(Protocol):
    """Where readings come from: ``label`` (``nvml`` / ``nvidia-smi``), the GPU's ``name`` and ``id``."""

    label: str
    name: str
    id: str

    def read(self) -> tuple[float, float]:
        """One reading: (utilisation %, memory used MiB). Raises :class:`SourceError`."""

    def close(self) -> None:
        """Release what the source holds."""


class PeakMemory(Protocol):
    """Peak allocated memory of the run's process on its GPU, reset at each stage's start."""

    def reset(self) -> None:
        """Start a new peak."""

    def peak_mib(self) -> float:
        """The peak since the last reset, in MiB."""


class NvmlSource:
    """Readings from NVML, for the first of ``ids`` (UUIDs or indices, as NVML names GPUs) it knows."""

    label = "nvml"

    def __init__(self, ids: Sequence[str]) -> None:
        if pynvml is None:
            raise SourceError("pynvml (nvidia-ml-py) is not installed")
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise SourceError(f"NVML did not start: {exc}") from None
        for gpu_id in ids:
            try:
                self._handle = (pynvml.nvmlDeviceGetHandleByIndex(int(gpu_id)) if gpu_id.isdigit()
                                else pynvml.nvmlDeviceGetHandleByUUID(gpu_id.encode()))
                name = pynvml.nvmlDeviceGetName(self._handle)
            except pynvml.NVMLError:
                continue
            self.id, self.name = gpu_id, name.decode() if isinstance(name, bytes) else str(name)
            return
        self.close()
        raise SourceError(f"NVML knows none of the GPU ids {', '.join(ids)}")

    def read(self) -> tuple[float, float]:  # noqa: D102 - Source.read
        try:
            util = pynvml.nvmlDeviceGetUtilizationRates(self._handle).gpu
            used = pynvml.nvmlDeviceGetMemoryInfo(self._handle).used
        except pynvml.NVMLError as exc:
            raise SourceError(f"NVML: {exc}") from None
        return _checked(float(util), float(used) / MIB, f"{util}, {used} B")

    def close(self) -> None:  # noqa: D102 - Source.close
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass  # already shut down, or never started: nothing held


class SmiSource:
    """Readings from ``nvidia-smi -i ID``, for the first of ``ids`` it answers for."""

    label = "nvidia-smi"

    def __init__(self, ids: Sequence[str]) -> None:
        exe = shutil.which("nvidia-smi")
        if exe is None:
            raise SourceError("nvidia-smi is not on PATH")
        self._exe, failures = exe, []
        for gpu_id in ids:
            try:
                self.name, self.id = self._query("name", gpu_id), gpu_id
                return
            except SourceError as exc:
                failures.append(str(exc))
        raise SourceError("; ".join(failures) or "no GPU id to ask nvidia-smi about")

    def _query(self, fields: str, gpu_id: str) -> str:
        """The one line ``nvidia-smi`` prints for ``fields`` of GPU ``gpu_id``."""
        try:
            done = subprocess.run([self._exe, f"--query-gpu={fields}", "--format=csv,noheader,nounits", "-i", gpu_id],
                                  capture_output=True, text=True, timeout=SMI_TIMEOUT_S, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            raise SourceError(f"nvidia-smi did not answer: {exc}") from None
        lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
        if done.returncode != 0 or len(lines) != 1:
            said = (done.stderr.strip() or done.stdout.strip())[:200]
            raise SourceError(f"nvidia-smi -i {gpu_id} --query-gpu={fields} exited with {done.returncode} and "
                              f"printed {len(lines)} line(s), not 1: {said!r}")
        return lines[0]

    def read(self) -> tuple[float, float]:  # noqa: D102 - Source.read
        line = self._query("utilization.gpu,memory.used", self.id)
        fields = [field.strip() for field in line.split(",")]
        try:
            util, used = (float(field) for field in fields)
        except ValueError:  # also "[N/A]" (a MIG instance) or a third field
            raise SourceError(f"cannot read nvidia-smi's {line[:80]!r} as 'utilization %, memory MiB'") from None
        return _checked(util, used, line)

    def close(self) -> None:  # noqa: D102 - Source.close
        pass  # each reading is its own process: nothing held


def _checked(util: float, used: float, raw: str) -> tuple[float, float]:
    if not (math.isfinite(util) and math.isfinite(used) and 0 <= util <= 100 and used >= 0):
        raise SourceError(f"implausible reading {raw[:80]!r}: utilisation must lie in 0-100 %, memory be >= 0")
    return util, used


class TorchPeaks:
    """:class:`PeakMemory` from torch's caching allocator on CUDA device ``index``."""

    def __init__(self, index: int) -> None:
        self.index = index

    def reset(self) -> None:  # noqa: D102 - PeakMemory.reset
        import torch  # lazy (torch)

        torch.cuda.reset_peak_memory_stats(self.index)

    def peak_mib(self) -> float:  # noqa: D102 - PeakMemory.peak_mib
        import torch  # lazy (torch)

        return torch.cuda.max_memory_allocated(self.index) / MIB


def gpu_ids(uuid: str, index: int, visible: str | None) -> list[str]:
    """How NVML and ``nvidia-smi`` may name torch's CUDA device ``index``, best first.

    Args:
        uuid: The UUID torch reports (with or without its ``GPU-`` / ``MIG-`` prefix; empty if unknown).
        index: torch's device index, which counts only the devices in ``CUDA_VISIBLE_DEVICES``.
        visible: ``CUDA_VISIBLE_DEVICES`` (None when unset), mapping torch's index back to the machine's.
    """
    ids = [uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"] if uuid else []
    entries = [entry.strip() for entry in (visible or "").split(",")]
    physical = entries[index] if visible is not None and index < len(entries) and entries[index] else str(index)
    return ids + [physical] if physical not in ids else ids


class GpuMonitor:
    """Samples one GPU in a daemon thread; a context manager that stops the thread however the run ends.

    Args:
        source: Where readings come from; None when nothing is sampled (``reason`` or ``error`` says why).
        peaks: Torch's peak allocated memory per stage (None: not recorded).
        interval_s: Seconds between samples.
        reason: Why nothing is sampled on purpose (a CPU run): the summary is then only that.
        error: Why no source started, on a GPU run.
        name: The GPU's name when known without a source.
    """

    def __init__(self, source: Source | None, *, peaks: PeakMemory | None = None,
                 interval_s: float = SAMPLE_INTERVAL_S, reason: str | None = None, error: str | None = None,
                 name: str | None = None) -> None:
        self.source, self.peaks, self.interval_s = source, peaks, interval_s
        self.reason, self.error = reason, error
        self.name = source.name if source is not None else name
        self.samples: list[tuple[str | None, float, float]] = []  # (stage, utilisation %, memory used MiB)
        self.stages: dict[str, float | None] = {}  # stage → torch's peak allocated MiB, in the order they ran
        self._stage: str | None = None
        self._lock, self._stop = Lock(), Event()
        self._thread: Thread | None = None
        self._closed = False

    def __enter__(self) -> GpuMonitor:
        if self.source is not None:
            self._thread = Thread(target=self._loop, name=THREAD_NAME, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _loop(self) -> None:
        while self.sample_once() and not self._stop.wait(self.interval_s):
            pass

    def sample_once(self) -> bool:
        """Take one reading for the current stage; False (with ``error`` set, once) when the source broke."""
        if self.source is None or self.error is not None:
            return False
        try:
            util, used = self.source.read()
        except Exception as exc:  # noqa: BLE001 - whatever breaks the source stops sampling, never the run
            self.error = f"{self.source.label} stopped after {len(self.samples)} sample(s): {exc}"
            return False
        with self._lock:
            self.samples.append((self._stage, util, used))
        return True

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Attribute the samples taken while the block runs to stage ``name``, and record its peak memory."""
        if self.peaks is not None:
            self.peaks.reset()
        with self._lock:
            previous, self._stage = self._stage, name
        self.stages[name] = None
        try:
            yield
        finally:
            with self._lock:
                self._stage = previous
            if self.peaks is not None:
                self.stages[name] = round(self.peaks.peak_mib(), 1)

    def stop(self) -> None:
        """Stop the sampling thread and release the source (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + SMI_TIMEOUT_S + 1)
            self._thread = None
        if self.source is not None and not self._closed:  # once: NVML counts its inits and shutdowns
            self._closed = True
            self.source.close()

    def summary(self) -> dict[str, Any]:
        """Stop sampling and return ``env.gpu`` (see the module docstring for its shapes)."""
        self.stop()
        if self.reason is not None:
            return {"sampled": False, "reason": self.reason}
        with self._lock:
            samples = list(self.samples)
        stages = {name: {**_figures([s for s in samples if s[0] == name]), "torch_peak_allocated_mib": peak}
                  for name, peak in self.stages.items()}
        out: dict[str, Any] = {"sampled": bool(samples)}
        if not samples:
            out["reason"] = self.error or "no sample was taken (the run ended before the first reading)"
        return {**out, "source": None if self.source is None else self.source.label, "interval_s": self.interval_s,
                "name": self.name, "id": None if self.source is None else self.source.id, "error": self.error,
                **_figures(samples), "stages": stages}


def _figures(samples: list[tuple[str | None, float, float]]) -> dict[str, Any]:
    """Count, mean utilisation, busy share (utilisation above 0 %) and peak memory of some samples."""
    if not samples:
        return {"samples": 0, "utilization_mean_pct": None, "busy_share": None, "memory_used_peak_mib": None}
    utils = [util for _, util, _ in samples]
    return {"samples": len(samples), "utilization_mean_pct": round(sum(utils) / len(utils), 1),
            "busy_share": round(sum(util > 0 for util in utils) / len(utils), 3),
            "memory_used_peak_mib": round(max(used for _, _, used in samples), 1)}


def open_monitor(ids: Sequence[str], *, name: str | None = None, peaks: PeakMemory | None = None,
                 sources: Sequence[str] = SOURCES, interval_s: float = SAMPLE_INTERVAL_S) -> GpuMonitor:
    """A monitor of the GPU named by the first of ``ids`` that a source knows, trying ``sources`` in order.

    A source that cannot start is no error: the monitor samples nothing, and its summary says why.
    """
    failures = []
    for label in sources:
        try:
            source = NvmlSource(ids) if label == "nvml" else SmiSource(ids)
        except SourceError as exc:
            failures.append(f"{label}: {exc}")
            continue
        return GpuMonitor(source, peaks=peaks, interval_s=interval_s)
    return GpuMonitor(None, peaks=peaks, interval_s=interval_s, name=name,
                      error="no GPU sampling source started (" + "; ".join(failures) + ")")


def monitor(device: str, *, interval_s: float = SAMPLE_INTERVAL_S, sources: Sequence[str] = SOURCES) -> GpuMonitor:
    """The monitor of a run on ``device`` (``cuda`` or ``cpu``, resolved): sampling torch's current CUDA
    device, or, on any other device, one that starts no thread and reports that nothing was sampled."""
    if device != "cuda":
        return GpuMonitor(None, reason=f"the run's device is {device}: no GPU was sampled")
    import torch  # lazy (torch)

    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    ids = gpu_ids(str(getattr(props, "uuid", "") or ""), index, os.environ.get("CUDA_VISIBLE_DEVICES"))
    return open_monitor(ids, name=props.name, peaks=TorchPeaks(index), sources=sources, interval_s=interval_s)


__all__ = ["SAMPLE_INTERVAL_S", "GpuMonitor", "NvmlSource", "SmiSource", "SourceError", "TorchPeaks", "gpu_ids",
           "monitor", "open_monitor"]

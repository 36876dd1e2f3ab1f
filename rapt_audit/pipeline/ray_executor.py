"""Sweeps on Ray (``rapt-audit run --sweep ... --executor ray``): every cell is a Ray task.

The driver (the process that runs the command) checks every cell first, exactly as an in-process
sweep does (:func:`~rapt_audit.pipeline.sweep.check_cells`), reuses the finished ones, and submits
each pending cell as a task that declares its resources (``--cpus-per-cell``, ``--gpus-per-cell``).
The worker runs :func:`rapt_audit.pipeline.runner.compute` and returns the result *document*; it
never needs the driver's output directory, so workers on other machines (whose disks differ) work.
The driver validates each document against the result schema, checks that it is the cell's run on
the data the driver checked, and writes ``<cell>/result.json`` atomically while holding that cell
directory's lock (taken when the cell is submitted, released after the write). It submits only as
many cells as the live nodes can run at once and queues the rest itself, so the progress lines can
say how many are running and queued, and the locks held stay few. This side of the loop is
:class:`~rapt_audit.pipeline.cell_driver.CellDriver`, shared with ``--jobs N``. Each worker computes
with ``--cpus-per-cell`` threads (rounded down, at least 1; :mod:`~rapt_audit.encoder.threads`), set
before its cell runs, so cells side by side do not oversubscribe the cores.

Failures: a worker process that dies (killed, out of memory, node lost) is a system failure, and
Ray runs the task again (``max_retries``); an exception raised by the run (a ``DataError``, a bug)
is not retried: the cell is marked ``failed`` in ``sweep.json`` and the other cells go on. After the
last cell the sweep raises :class:`~rapt_audit.pipeline.sweep.CellsFailed` listing the failed cells.
``Ctrl-C`` cancels the running tasks and keeps the finished cells, as an in-process sweep does.
``--time-budget`` submits a cell only while its estimate (the sweep's one estimator, learning from the
cells timed by the driver, submit to write) fits in what is left; once one does not, the running tasks
finish and are written and the rest stay pending for the next call.

Ray is an optional extra (``pip install 'rapt-audit[ray]'``), imported only when a Ray sweep runs.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import socket
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from rapt_audit.api.errors import RaptAuditError, UsageError
from rapt_audit.encoder.threads import available_cores, cell_threads
from rapt_audit.pipeline.cell_driver import CellDriver, CellError, cell_task, reuse
from rapt_audit.pipeline.config import RunConfig
from rapt_audit.pipeline.results import RunResult
from rapt_audit.pipeline.sweep import Cell, Log, SweepIndex

EXTRA = "pip install 'rapt-audit[ray]'"
DEFAULT_PORT = 6379  # what `ray start --head` listens on
PROBE_TIMEOUT_S = 5.0
#: Environment variables that change how a run behaves, given to every worker as the driver has them.
FORWARDED_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "HF_HOME", "OMP_NUM_THREADS",
                 "MKL_NUM_THREADS")
#: Paths on the driver's disk: given to workers only on a local Ray instance (a cluster's nodes use their own).
LOCAL_ENV = ("RAPT_AUDIT_DATA", "RAPT_AUDIT_CACHE")


def import_ray() -> Any:
    """Import Ray, or fail with the command that installs it.

    Raises:
        UsageError: when Ray is not installed.
    """
    try:
        import ray  # lazy (ray)
    except ImportError as exc:
        raise UsageError(f"--executor ray needs Ray, an optional extra: {EXTRA} ({exc})") from None
    return ray


def probe_address(address: str, *, timeout: float = PROBE_TIMEOUT_S) -> None:
    """Fail fast when nothing listens at a Ray cluster's address.

    ``ray.init`` retries an unreachable address for minutes before it gives up; a plain TCP connect
    to the head's port answers in ``timeout`` seconds at most. (A port where another service
    listens passes this check, and ``ray.init`` may then wait that long.) ``auto`` (find the cluster of this
    machine) is left to Ray, which fails at once when there is none.

    Raises:
        UsageError: when the address is malformed or nothing accepts a connection there.
    """
    if address == "auto":
        return
    target = address.split("://", 1)[1] if "://" in address else address
    host, _, port_text = target.rpartition(":") if ":" in target else (target, "", str(DEFAULT_PORT))
    try:
        port = int(port_text)
    except ValueError:
        raise UsageError(f"--address {address!r} is not HOST:PORT (for example 10.0.0.5:6379)") from None
    try:
        with socket.create_connection((host.strip("[]"), port), timeout=timeout):
            pass
    except OSError as exc:
        raise UsageError(f"no Ray cluster answers at {address} ({exc or type(exc).__name__}); start one with "
                         f"'ray start --head --port={port}' on {host}, or check the address and that port "
                         f"{port} is open. Without --address a local Ray instance is started.") from None


@dataclass
class RayExecutor:
    """Run a sweep's cells as Ray tasks; see the module docstring.

    Attributes:
        address: A running cluster's head, ``HOST:PORT`` (``ray start --head`` prints it) or
            ``auto``; ``None`` takes ``$RAY_ADDRESS`` as Ray does, and without it starts a local
            Ray instance sized to this machine. A Ray already initialized in this process
            (``ray.init`` by the caller) is used as it is.
        cpus_per_cell: CPUs each cell's task declares (Ray runs as many cells at once as fit); its
            worker computes with that many threads (rounded down, at least 1).
        gpus_per_cell: GPUs each cell's task declares; ``1`` for a GPU grid (``--device cuda``
            needs it: Ray gives a GPU only to tasks that ask for one).
        max_retries: How often a cell whose worker process died is run again.
        compute: The function a worker runs on a cell's config (default
            :func:`rapt_audit.pipeline.runner.compute`, looked up at call time); it must be
            importable on the workers.
    """

    address: str | None = None
    cpus_per_cell: float = 1.0
    gpus_per_cell: float = 0.0
    max_retries: int = 2
    compute: Callable[[RunConfig], RunResult] | None = None

    def __post_init__(self) -> None:
        # ray.init() would join $RAY_ADDRESS anyway; knowing it here lets check() probe it first.
        self.address = self.address or os.environ.get("RAY_ADDRESS") or None
        for flag, value in (("--cpus-per-cell", self.cpus_per_cell), ("--gpus-per-cell", self.gpus_per_cell)):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise UsageError(f"{flag} must be a number >= 0, got {value!r}")
        if self.max_retries < 0:
            raise UsageError(f"max_retries must be >= 0, got {self.max_retries}")

    def check(self) -> None:
        """What can be checked before the cells: Ray is installed and the cluster answers.

        Raises:
            UsageError: naming the extra to install, or the unreachable address.
        """
        import_ray()
        if self.address is not None:
            probe_address(self.address)

    def run_cells(self, cells: Sequence[Cell], *, index: SweepIndex, log: Log,
                  deadline: tuple[float, float] | None = None,
                  clock: Callable[[], float] = time.monotonic) -> list[tuple[Cell, RunResult]]:
        """Run the pending cells of a checked sweep on Ray; see :class:`~rapt_audit.pipeline.sweep.Executor`.

        ``deadline`` and ``clock`` are the sweep's time budget (:class:`~rapt_audit.pipeline.cell_driver.CellDriver`).

        Raises:
            UsageError: when Ray is missing, the cluster is unreachable, or no node can run a cell.
            BudgetSpent: after the running cells ended, when the time budget left cells unstarted.
            CellsFailed: after every cell ended, when some failed (the others are written).
        """
        pending = [c for c in cells if index.status[c.name] == "pending"]
        if not pending:  # a finished sweep: nothing to start Ray for
            return [(c, reuse(c, index, log, f"{i}/{len(cells)}")) for i, c in enumerate(cells, 1)]
        cuda = [c.label for c in pending if c.config.device == "cuda"]
        if cuda and self.gpus_per_cell == 0:
            raise UsageError(f"cell {cuda[0]} asks for --device cuda, but its Ray task declares no GPU; add "
                             "--gpus-per-cell 1 (Ray gives a GPU only to the tasks that ask for one)")
        ray = import_ray()
        started_here = self._connect(ray, log)
        try:
            return _Driver(self, ray, cells, index, log, owns_ray=started_here, deadline=deadline, clock=clock).run()
        finally:
            if started_here:
                ray.shutdown()

    def _connect(self, ray: Any, log: Log) -> bool:
        """Start or join Ray; return whether this call started it (and so must shut it down)."""
        if ray.is_initialized():
            return False
        self.check()
        options: dict[str, Any] = {"logging_level": logging.WARNING}
        if self.address is None:
            options.update(num_cpus=available_cores(), include_dashboard=False)
        else:
            options["address"] = self.address
        try:
            previous = signal.getsignal(signal.SIGTERM)
        except ValueError:  # pragma: no cover - not the main thread
            previous = None
        try:
            ray.init(**options)
        except (ConnectionError, RuntimeError, TimeoutError, ValueError) as exc:
            where = f"the Ray cluster at {self.address}" if self.address else "a local Ray instance"
            raise UsageError(f"could not start or join {where}: {exc}") from None
        finally:
            # ray.init installs its own SIGTERM handler; the CLI's turns SIGTERM into a clean interrupt.
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
        resources, threads = ray.cluster_resources(), self.threads()
        log(f"Ray {'cluster at ' + self.address if self.address else 'on this machine'}: "
            f"{resources.get('CPU', 0):g} CPU, {resources.get('GPU', 0):g} GPU; each cell declares "
            f"{self.cpus_per_cell:g} CPU, {self.gpus_per_cell:g} GPU and computes with {threads} "
            f"thread{'s' if threads > 1 else ''}")
        return True

    def threads(self) -> int:
        """The threads each cell's worker computes with: ``cpus_per_cell`` rounded down (at least 1).

        The user's ``OMP_NUM_THREADS`` (forwarded to the workers) wins; decided here, since a worker
        sees Ray's own ``OMP_NUM_THREADS`` and cannot tell whose it is.
        """
        return cell_threads(self.cpus_per_cell)

    def worker_env(self) -> dict[str, str]:
        """The driver's environment variables that every worker gets (:data:`FORWARDED_ENV`, :data:`LOCAL_ENV`)."""
        names = FORWARDED_ENV + (LOCAL_ENV if self.address is None else ())
        return {k: os.environ[k] for k in names if k in os.environ}


class _Driver(CellDriver):
    """One Ray sweep's loop: cells are Ray tasks, as many submitted as the live nodes can run."""

    where = "on Ray"
    worker = "its Ray worker"

    def __init__(self, executor: RayExecutor, ray: Any, cells: Sequence[Cell], index: SweepIndex, log: Log, *,
                 owns_ray: bool, deadline: tuple[float, float] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(cells, index, log, executor.compute, deadline=deadline, clock=clock)
        self.ex, self.ray, self.owns_ray = executor, ray, owns_ray
        self.warned = False
        self.threads = executor.threads()
        options: dict[str, Any] = {"num_cpus": executor.cpus_per_cell, "num_gpus": executor.gpus_per_cell,
                                   "max_retries": executor.max_retries, "retry_exceptions": False}
        env = executor.worker_env()
        if env:
            options["runtime_env"] = {"env_vars": env}
        self.task = ray.remote(cell_task).options(**options)

    def run(self) -> list[tuple[Cell, RunResult]]:
        """Run the pending cells on Ray; see :meth:`CellDriver.run`.

        Raises:
            UsageError: when no node of a local Ray instance can run a cell.
        """
        if self.queue and self.capacity() == 0 and self.ex.address is None:
            raise UsageError(f"no cell fits on this machine's Ray instance: each declares {self.ex.cpus_per_cell:g} "
                             f"CPU and {self.ex.gpus_per_cell:g} GPU, and Ray sees {self.ray.cluster_resources()}; "
                             "lower --cpus-per-cell / --gpus-per-cell")
        return super().run()

    def capacity(self, *, quiet: bool = False) -> int:
        """How many cells the live nodes can run at once (Ray queues the rest; so do we, to count them)."""
        need = {"CPU": self.ex.cpus_per_cell, "GPU": self.ex.gpus_per_cell}
        total = 0
        for node in self.ray.nodes():
            if node.get("Alive"):
                have = node.get("Resources", {})
                fits = [int(have.get(k, 0) // v) for k, v in need.items() if v > 0]
                total += min(fits) if fits else len(self.cells)
        if total == 0 and self.ex.address is not None:
            if not quiet and not self.warned:
                self.warned = True
                self.log(f"no node of the cluster can run a cell now ({self.ex.cpus_per_cell:g} CPU, "
                         f"{self.ex.gpus_per_cell:g} GPU each); waiting for one to join")
            return 1  # an autoscaling cluster may add one; Ray holds the task until then
        return total

    def start(self, cell: Cell) -> Any:
        """Submit the cell's task; its worker computes with the cell's share of threads."""
        return self.task.remote(self.compute, cell.config, self.threads, self.reuse.get(cell.name))

    def wait(self) -> list[Any]:
        """The refs of tasks that ended within a second."""
        ready, _ = self.ray.wait(list(self.running), num_returns=1, timeout=1.0)  # Ctrl-C stays prompt
        return ready

    def outcome(self, handle: Any) -> Any:
        """The task's document; a run that raised is not retried, a worker that died was (``max_retries``)."""
        try:
            return self.ray.get(handle)
        except self.ray.exceptions.RayTaskError as exc:  # the run raised: not retried
            cause = getattr(exc, "cause", None) or exc
            hint = ""
            if isinstance(cause, ImportError):
                hint = " (install rapt-audit, the driver's version, on every node of the cluster)"
            elif not isinstance(cause, RaptAuditError):
                self.log(str(exc))  # a bug: the worker's traceback helps its report
            raise CellError(f"{type(cause).__name__}: {cause}{hint}") from None
        except self.ray.exceptions.RayError as exc:  # the worker died more often than max_retries
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise CellError(f"{type(exc).__name__} after {self.ex.max_retries} retries: {first}") from None

    def cancel(self) -> None:
        """Our own session ends with ray.shutdown(), which stops this job's tasks everywhere.

        A caller's session lives on, so its tasks are cancelled; not with force=True, which can abort
        the driver (a Ray check failure) when a task finishes at the moment it is killed.
        """
        if not self.owns_ray:
            for ref in self.running:
                self.ray.cancel(ref)


__all__ = ["EXTRA", "FORWARDED_ENV", "LOCAL_ENV", "RayExecutor", "import_ray", "probe_address"]

"""How many threads a process computes with: torch's intra-op pool and the OpenMP/BLAS pools.

Cells of a sweep that run side by side (``--jobs N``, or Ray tasks) must split the cores between
them. Left alone, every process starts one compute thread per core, and two processes on two
cores each spin four threads: we measured a smoke run's NER classifier take 80 s beside another
run against 8.4 s alone. A worker therefore calls :func:`set_threads` with its share
(:func:`cell_threads`) before its cell runs. A user's ``OMP_NUM_THREADS`` wins over the share,
as it does for torch itself.

:func:`~rapt_audit.encoder.models.one_thread` stays the way to run a block single-threaded for a
while (small networks); it restores what this module set.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

try:  # sets the pools of native libraries already loaded (numpy's OpenBLAS); a dependency
    import threadpoolctl
except ImportError:  # pragma: no cover - scikit-learn brings it; without it, the variables below still act
    threadpoolctl = None

#: Read by OpenMP (torch), MKL and OpenBLAS when they load, so they also cover libraries loaded later.
POOL_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def available_cores() -> int:
    """The cores this process may run on (``taskset``, container CPU sets and cgroups' cpusets honoured)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return os.cpu_count() or 1


def thread_share(cores: float, jobs: int = 1) -> int:
    """Threads for each of ``jobs`` processes sharing ``cores`` (a Ray task's CPUs, or this machine's).

    Rounded down, so the processes together never ask for more threads than cores, and at least 1.
    """
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    return max(1, int(cores // jobs))


def user_threads(environ: Mapping[str, str] | None = None) -> int | None:
    """The thread count the user set with ``OMP_NUM_THREADS`` (a positive integer), else None."""
    value = (os.environ if environ is None else environ).get("OMP_NUM_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def cell_threads(cores: float, jobs: int = 1) -> int:
    """The threads a cell's worker should use: the user's ``OMP_NUM_THREADS``, else its share of ``cores``.

    Decided where the user's environment is seen (the command's process): a Ray worker has
    ``OMP_NUM_THREADS`` set by Ray itself, so it cannot tell whose it is.
    """
    return user_threads() or thread_share(cores, jobs)


def set_threads(threads: int) -> None:
    """Make this process compute with ``threads`` threads, for torch, OpenMP, MKL and OpenBLAS.

    Meant for a worker process that runs cells, before its cell runs: it changes the whole
    process. Libraries that are not loaded yet read the environment variables when they load
    (torch is imported by the first stage that needs it, not here: a run served from the caches
    never pays for it; torch caps a count read there at the machine's cores, which a share never
    exceeds); those loaded already are set directly.
    """
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    for name in POOL_ENV:
        os.environ[name] = str(threads)
    if threadpoolctl is not None:
        threadpoolctl.threadpool_limits(threads)  # applies now and stays: nothing restores it
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "set_num_threads"):
        torch.set_num_threads(threads)


def current_threads() -> int:
    """The intra-op threads torch computes with in this process, without importing torch.

    Where torch is not loaded (a run served from the caches), the count it would start with:
    ``OMP_NUM_THREADS`` when set, else the available cores.
    """
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "get_num_threads"):
        return int(torch.get_num_threads())
    return user_threads() or available_cores()


__all__ = ["POOL_ENV", "available_cores", "cell_threads", "current_threads", "set_threads", "thread_share",
           "user_threads"]

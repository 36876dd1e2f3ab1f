"""Threads per process (issue #29): each cell's share of the cores, the user's OMP_NUM_THREADS honoured."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rapt_audit.encoder.threads import cell_threads, thread_share, user_threads
from rapt_audit.pipeline.local_executor import LocalExecutor
from rapt_audit.pipeline.ray_executor import RayExecutor


@pytest.mark.parametrize(("cores", "jobs", "threads"), [
    (2, 1, 2), (2, 2, 1), (16, 3, 5), (16, 16, 1), (1, 4, 1),  # cores // jobs, at least 1
    (2.5, 1, 2), (0.5, 1, 1), (0, 1, 1),                        # a Ray task's CPUs: rounded down, at least 1
])
def test_thread_share_is_the_cores_divided_rounded_down_and_at_least_one(cores, jobs, threads):
    assert thread_share(cores, jobs) == threads


def test_thread_share_refuses_no_jobs():
    with pytest.raises(ValueError, match="jobs must be >= 1"):
        thread_share(4, 0)


@pytest.mark.parametrize(("value", "seen"), [("3", 3), (" 2 ", 2), ("0", None), ("", None), ("four", None),
                                             ("-1", None)])
def test_only_a_positive_omp_num_threads_is_the_users(value, seen):
    assert user_threads({"OMP_NUM_THREADS": value}) == seen


def test_executors_give_each_cell_its_share_unless_the_user_set_omp_num_threads(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert RayExecutor(cpus_per_cell=2.5).threads() == 2
    assert RayExecutor(cpus_per_cell=0.5, gpus_per_cell=1).threads() == 1
    assert LocalExecutor(jobs=3, cores=8).threads(3) == 2
    assert LocalExecutor(jobs=4, cores=8).threads(2) == 4  # two cells left: two workers share the cores
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert RayExecutor(cpus_per_cell=8).threads() == 3 and LocalExecutor(jobs=2, cores=8).threads(2) == 3
    assert cell_threads(8, 2) == 3


def test_set_threads_sets_torch_and_the_native_pools_even_after_torch_loaded():
    """In a fresh process (it changes the whole process): torch loaded first, then the share set."""
    code = ("import json, os, torch, threadpoolctl; from rapt_audit.encoder.threads import set_threads, "
            "current_threads; set_threads(3); print(json.dumps({'torch': torch.get_num_threads(), "
            "'current': current_threads(), 'omp': os.environ['OMP_NUM_THREADS'], "
            "'pools': sorted({p['num_threads'] for p in threadpoolctl.threadpool_info()})}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"torch": 3, "current": 3, "omp": "3", "pools": [3]}

"""An attack's time limit (the run setting ``attack_timeout``): a real stop, not an abandoned thread.

Why not a worker thread or process: an attack left running in a thread keeps computing and holds its
memory (torch does not stop because nobody waits), and a worker process per attack would have to be
handed the release, the splits, the run's shared encoder and caches. Instead the attack runs where it
always ran, and at its deadline an exception is raised *inside* it: in the main thread by ``SIGALRM``
(which also wakes a ``time.sleep`` or a blocking read), elsewhere by ``PyThreadState_SetAsyncExc`` (raised
at the attack's next Python line). Its stack unwinds, so its tensors are freed and nothing of it goes on.
What neither can interrupt is one long call into C (a single matrix product): the stop comes when it
returns to Python. :class:`AttackTimedOut` is a ``BaseException``, like ``KeyboardInterrupt``, so that an
attack's own ``except Exception`` does not swallow it; it is raised again every second while the attack
is still inside the limit, and an attack that caught it and returned anyway has its late answer refused.
"""

from __future__ import annotations

import ctypes
import math
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rapt_audit.api.parsing import parse_seconds

#: Seconds between the raises after the first, for an attack that caught the first one.
_AGAIN_S = 1.0


class AttackTimedOut(BaseException):
    """Raised inside an attack that ran past its time limit (not an ``Exception``: a plugin cannot catch it
    with ``except Exception``)."""


def check_attack_timeout(value: Any) -> float | None:
    """``value`` as a time limit in seconds (``None``: no limit; ``inf`` too).

    Raises:
        UsageError: when it is not a positive number.
    """
    if value is None:
        return None
    seconds = parse_seconds(value, key="attack_timeout",
                            fix="set it with --attack-timeout SECONDS or --set attack_timeout=SECONDS")
    return None if math.isinf(seconds) else seconds


def timeout_message(name: str, seconds: float) -> str:
    """What a result records for attack ``name`` stopped at its limit of ``seconds``: the limit and how to raise it."""
    return (f"attack {name!r} did not finish within its time limit of {seconds:g} s and was stopped; give it more "
            f"time with --attack-timeout SECONDS (or --set attack_timeout=SECONDS; inf: no limit)")


@contextmanager
def attack_time_limit(seconds: float | None, name: str) -> Iterator[None]:
    """Run the block with at most ``seconds`` seconds (``None``: unlimited), else raise :class:`AttackTimedOut`.

    Args:
        seconds: The limit.
        name: The attack's name (for the thread that raises outside the main thread).
    """
    if seconds is None:
        yield
    elif threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):
        with _alarm(seconds):
            yield
    else:
        with _async_raise(seconds, name):
            yield


@contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    """The limit by ``SIGALRM``, repeated every :data:`_AGAIN_S` until the block ends (main thread only)."""
    state = {"active": True, "fired": False}

    def on_alarm(signum: int, frame: Any) -> None:
        if state["active"]:  # an alarm landing while the block ends must not raise in the clean-up
            state["fired"] = True
            raise AttackTimedOut()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds, _AGAIN_S)
    try:
        yield
    finally:
        state["active"] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL if previous is None else previous)
    if state["fired"]:  # the attack caught the stop and returned: its answer came too late to keep
        raise AttackTimedOut()


@contextmanager
def _async_raise(seconds: float, name: str) -> Iterator[None]:
    """The limit by an exception set on this thread from a watcher thread (any thread; not inside C calls)."""
    ident, lock, stop = threading.get_ident(), threading.Lock(), threading.Event()
    state = {"active": True, "fired": False}

    def fire() -> None:
        with lock:
            if state["active"]:
                state["fired"] = True
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(AttackTimedOut))

    def watch() -> None:
        if stop.wait(seconds):
            return
        fire()
        while not stop.wait(_AGAIN_S):
            fire()

    threading.Thread(target=watch, name=f"rapt-audit time limit {name}", daemon=True).start()
    try:
        yield
    finally:
        with lock:
            state["active"] = False
            stop.set()
            if state["fired"]:  # one still pending would land in the caller's code: cleared
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), None)
    if state["fired"]:
        raise AttackTimedOut()


__all__ = ["AttackTimedOut", "attack_time_limit", "check_attack_timeout", "timeout_message"]

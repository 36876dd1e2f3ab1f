"""Bounded and spoken (issue #60, item 3): nothing a plugin does can hang a command silently.

a. A third-party plugin whose import hangs: a run of built-in plugins never imports it, and a command that
   does import it stops waiting after ``RAPT_AUDIT_PLUGIN_TIMEOUT`` seconds, naming it; the others work.
b. An attack that never returns is stopped at the run's ``attack_timeout`` and recorded as failed, naming
   the attack, the limit and how to raise it; the other attacks are kept, and the limit is not in ``cell_id``.
c. SIGTERM during an attack keeps the attacks that finished: the partial result is written, the command exits
   143, and the same command runs only the attacks that are missing.

Fake plugins sleep a little; the limits are set small, so each test takes a few seconds.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any

import pytest

import rapt_audit.api.plugins as plugins
from rapt_audit.api.plugins import ATTACKS, DEFENSES
from rapt_audit.cli.main import main
from rapt_audit.pipeline.config import RunConfig
from tests.fake_plugins import FakeAttack

SMOKE = ["--profile", "smoke", "--dataset", "synthetic", "--quiet",
         "--set", "data.victim_train=60", "--set", "data.victim_test=40",
         "--set", "data.attacker_train=60", "--set", "data.attacker_valid=30"]


def _main(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(autouse=True)
def _no_data(monkeypatch):
    monkeypatch.setenv("RAPT_AUDIT_DATA", "")


@pytest.fixture
def register():
    """``register(registry, name, cls)``: a plugin for this test only."""
    added = []

    def add(registry: Any, name: str, cls: type) -> None:
        registry.add(name, cls)
        added.append((registry, name))

    yield add
    for registry, name in added:
        registry.remove(name)


# ---------------------------------------------------------------- a. plugins that hang at import


class _Dist:
    name, version = "slowpkg", "1.0"


class _SlowEntryPoint:
    """An entry point whose module takes ``seconds`` to import; ``calls`` counts the imports begun."""

    def __init__(self, name: str, seconds: float, obj: Any = None) -> None:
        self.name, self.value, self.dist, self.seconds, self.obj = name, f"slowpkg.mod:{name}", _Dist(), seconds, obj
        self.calls, self.finished = 0, False

    def load(self) -> Any:
        self.calls += 1
        time.sleep(self.seconds)
        self.finished = True
        return self.obj


@pytest.fixture
def slow_plugins(monkeypatch):
    """``slow_plugins(defenses=[...], attacks=[...])``: installed entry points, nothing loaded yet."""
    monkeypatch.setattr(plugins, "_registered", {})
    monkeypatch.setattr(plugins, "_distributions", {})
    monkeypatch.setattr(plugins, "_loaded", False)
    names: list[str] = []

    def install(defenses: tuple = (), attacks: tuple = ()) -> None:
        groups = {"rapt_audit.defenses": list(defenses), "rapt_audit.attacks": list(attacks)}
        names.extend(ep.name for ep in (*defenses, *attacks))
        monkeypatch.setattr(plugins, "entry_points", lambda group: groups.get(group, []))

    yield install
    for name in names:
        DEFENSES.remove(name)
        ATTACKS.remove(name)


def test_a_run_of_builtins_never_imports_a_third_party_plugin(tmp_path, slow_plugins):
    slow_defense, slow_attack = _SlowEntryPoint("slow", 30), _SlowEntryPoint("slow_attack", 30)
    slow_plugins(defenses=[slow_defense], attacks=[slow_attack])
    code, _, err = _main(["run", "--defense", "identity", "--attacks", "random_guess", "--out",
                          str(tmp_path / "r"), *SMOKE])
    assert code == 0, err
    assert slow_defense.calls == 0 and slow_attack.calls == 0  # never imported, so never waited on


def test_a_plugin_that_hangs_at_import_is_left_out_after_the_time_limit_naming_it(monkeypatch, slow_plugins):
    monkeypatch.setenv("RAPT_AUDIT_PLUGIN_TIMEOUT", "0.3")
    slow = _SlowEntryPoint("slow", 30, obj=FakeAttack)
    slow_plugins(attacks=[slow])
    code, printed, err = _main(["ls", "attacks", "--params"])
    assert slow.calls == 1 and not slow.finished  # the command did not wait for the 30 s import
    assert code == 0 and "random_guess" in printed
    assert "attack plugin entry point 'slow' = 'slowpkg.mod:slow' of slowpkg 1.0 did not finish importing in 0.3 s" \
        in err
    assert "RAPT_AUDIT_PLUGIN_TIMEOUT" in err and "uninstall" in err
    code, _, err = _main(["run", "--defense", "identity", "--attacks", "slow", "--dry-run", *SMOKE])
    assert code == 2 and "attack 'slow' is installed but could not be loaded" in err and "0.3 s" in err


def test_a_bad_plugin_time_limit_is_one_clear_line(monkeypatch, slow_plugins):
    monkeypatch.setenv("RAPT_AUDIT_PLUGIN_TIMEOUT", "soon")
    slow_plugins(attacks=[_SlowEntryPoint("slow", 0, obj=FakeAttack)])
    code, _, err = _main(["ls", "attacks", "--params"])
    assert code == 2 and "RAPT_AUDIT_PLUGIN_TIMEOUT" in err and "Traceback" not in err


# ---------------------------------------------------------------- b. attacks that never return


@dataclass
class NeverReturns(FakeAttack):
    """Sleeps far longer than any limit."""

    def attack(self, release: Any, truth: Any, *, ctx: Any) -> Any:
        time.sleep(60)
        return super().attack(release, truth, ctx=ctx)


@dataclass
class SwallowsErrors(FakeAttack):
    """Loops, catching every Exception: a time limit must still stop it."""

    def attack(self, release: Any, truth: Any, *, ctx: Any) -> Any:
        end = time.monotonic() + 60
        while time.monotonic() < end:
            try:
                time.sleep(0.01)
            except Exception:  # noqa: BLE001 - the point of the fake
                pass
        return super().attack(release, truth, ctx=ctx)


@pytest.mark.parametrize("limit", [["--attack-timeout", "0.5"], ["--set", "attack_timeout=0.5"]])
def test_an_attack_past_its_time_limit_is_recorded_failed_and_the_others_kept(tmp_path, register, limit):
    register(ATTACKS, "hangs", NeverReturns)
    register(ATTACKS, "swallows", SwallowsErrors)
    out = tmp_path / "r"
    code, _, err = _main(["run", "--defense", "identity", "--attacks", "hangs,random_guess,swallows",
                          "--out", str(out), *limit, *SMOKE])
    assert code == 3, err
    attacks = json.loads((out / "result.json").read_text())["attacks"]
    assert "failed" not in attacks["random_guess"]
    for name in ("hangs", "swallows"):
        message = attacks[name]["failed"]
        assert f"attack {name!r} did not finish within its time limit of 0.5 s" in message
        assert "--attack-timeout" in message and "attack_timeout" in message


def test_a_time_limit_that_changes_no_number_is_not_in_the_cell_id():
    assert RunConfig(attack_timeout=5.0).cell_id() == RunConfig().cell_id()


def test_a_bad_attack_time_limit_is_one_clear_line(tmp_path):
    code, _, err = _main(["run", "--defense", "identity", "--attacks", "random_guess", "--dry-run",
                          "--attack-timeout", "-1", *SMOKE])
    assert code == 2 and "attack_timeout" in err and "Traceback" not in err


def test_the_time_limit_stops_an_attack_outside_the_main_thread():
    from rapt_audit.pipeline.time_limits import AttackTimedOut, attack_time_limit

    caught: list[BaseException] = []

    def busy() -> None:
        try:
            with attack_time_limit(0.3, "busy"):
                end = time.monotonic() + 10
                while time.monotonic() < end:
                    pass
        except AttackTimedOut as exc:
            caught.append(exc)

    thread = threading.Thread(target=busy)
    thread.start()
    thread.join(8)  # the loop runs 10 s unless stopped
    assert not thread.is_alive() and caught


# ---------------------------------------------------------------- c. SIGTERM keeps the attacks that finished

calls: dict[str, int] = {}


@dataclass
class Counted(FakeAttack):
    """A quick attack that counts how often it ran."""

    def attack(self, release: Any, truth: Any, *, ctx: Any) -> Any:
        calls[type(self).name] = calls.get(type(self).name, 0) + 1
        return super().attack(release, truth, ctx=ctx)


@dataclass
class Terminates(FakeAttack):
    """Sends this process a real SIGTERM in the middle of its work."""

    def attack(self, release: Any, truth: Any, *, ctx: Any) -> Any:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
        return super().attack(release, truth, ctx=ctx)


def test_sigterm_keeps_the_finished_attacks_and_the_rerun_runs_only_the_missing(tmp_path, register):
    calls.clear()
    register(ATTACKS, "first", type("First", (Counted,), {}))
    register(ATTACKS, "stopped", Terminates)
    register(ATTACKS, "never_started", type("NeverStarted", (Counted,), {}))
    out = tmp_path / "r"
    argv = ["run", "--defense", "identity", "--attacks", "first,stopped,never_started", "--out", str(out), *SMOKE]
    code, _, err = _main(argv)
    assert code == 128 + signal.SIGTERM, err
    assert "kept" in err and str(out) in err
    attacks = json.loads((out / "result.json").read_text())["attacks"]
    assert attacks["first"]["empirical_privacy"]["value"] == 0.5
    assert "interrupted" in attacks["stopped"]["failed"] and "interrupted" in attacks["never_started"]["failed"]
    assert calls == {"first": 1}
    ATTACKS.remove("stopped")
    register(ATTACKS, "stopped", type("Stopped", (Counted,), {}))  # the rerun finishes: only the missing attacks run
    code, _, err = _main(argv)
    assert code == 0, err
    assert calls == {"first": 1, "stopped": 1, "never_started": 1}
    result = json.loads((out / "result.json").read_text())
    assert all("failed" not in o for o in result["attacks"].values())
    assert "attack.first" in result["env"]["reused_stages"] and "attack.stopped" not in result["env"]["reused_stages"]

"""One broken plugin never costs the rest (issue #30, points 4-6).

Tiny fake plugins, registered for a test and removed after it, each break the contract in one of the
ways the issue's trial found: an attack that raises, returns a float, reports an empirical privacy of
1.7 or an undeclared metric; a defense that raises or releases the wrong thing; entry points that fail
to import, clash with a built-in or name a plain class. Each gives its clear outcome: a failed attack
recorded by name with what went wrong (exit 3, every other attack kept), a defense named in the error
(exit 2), a sweep that goes on, a warning instead of a broken command. Runs use ``--profile smoke
--dataset synthetic`` (seconds).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

import rapt_audit
import rapt_audit.api.plugins as plugins
from rapt_audit.api.params import CheckedParams, PositiveInt
from rapt_audit.api.plugins import ATTACKS, DEFENSES
from rapt_audit.api.types import AttackFailure, AttackResult, Estimate, Release
from rapt_audit.cli.main import main
from rapt_audit.pipeline.results import environment, read_result, write_result
from rapt_audit.reporting.check import compare_runs
from rapt_audit.reporting.collect import collect
from rapt_audit.reporting.leaderboard import render_leaderboard
from rapt_audit.reporting.report import build_report
from tests.fake_plugins import FakeAttack, OutOfRange, ReturnsFloat, UndeclaredMetric, estimate
from tests.result_factory import fake_result

SMOKE = ["--profile", "smoke", "--dataset", "synthetic", "--quiet"]
#: Split sizes for the runs computed in this process, whose subject (who is blamed, which signature) is not the numbers.
TINY_SPLITS = {"victim_train": 60, "victim_test": 40, "attacker_train": 60, "attacker_valid": 30}


_estimate, _Attack = estimate, FakeAttack


@dataclass
class RaisesInAttack(_Attack):
    """Raises in attack()."""

    def attack(self, release: Any, truth: Any, *, ctx: Any) -> Any:
        raise ValueError("boom")


@dataclass
class RaisesInFit(_Attack):
    """Raises in fit()."""

    def fit(self, aux: Any, defense: Any, *, ctx: Any) -> Any:
        raise RuntimeError("cannot train")


@dataclass
class MetricNotEstimate(_Attack):
    """Reports a metric as a bare number."""

    def attack(self, release: Any, truth: Any, *, ctx: Any) -> Any:
        return AttackResult(_estimate(0.5), {"token_accuracy": 0.3})


@dataclass
class _Defense(CheckedParams):
    """A fake text defense that releases the texts unchanged; subclasses break one rule each."""

    exposes: ClassVar[frozenset[str]] = frozenset({"texts"})
    p: PositiveInt = 3

    def fit(self, train: Any, *, ctx: Any) -> Any:
        return self

    def utility(self, test: Any, *, ctx: Any) -> Any:
        return {}

    def release(self, records: Any, *, ctx: Any) -> Any:
        return Release(tuple(r.uid for r in records), texts=tuple(r.text for r in records))


@dataclass
class DefenseRaises(_Defense):
    """Raises in fit()."""

    def fit(self, train: Any, *, ctx: Any) -> Any:
        raise KeyError("no such table")


@dataclass
class DefenseReleasesList(_Defense):
    """Releases a list of texts."""

    def release(self, records: Any, *, ctx: Any) -> Any:
        return [r.text for r in records]


@dataclass
class DefenseReleasesNumbers(_Defense):
    """Releases numbers as texts."""

    def release(self, records: Any, *, ctx: Any) -> Any:
        return Release(tuple(r.uid for r in records), texts=tuple(range(len(records))))


BROKEN_ATTACKS = {"a_raises": RaisesInAttack, "a_fit_raises": RaisesInFit, "a_float": ReturnsFloat,
                  "a_range": OutOfRange, "a_undeclared": UndeclaredMetric, "a_metric_type": MetricNotEstimate}


@pytest.fixture
def register():
    """``register(registry, name, cls)``: a plugin for this test only."""
    added = []

    def add(registry: Any, name: str, cls: type, **kw: Any) -> None:
        registry.add(name, cls, **kw)
        added.append((registry, name))

    yield add
    for registry, name in added:
        registry.remove(name)


def _main(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


# ---------------------------------------------------------------- point 4: attacks, defenses, sweeps


def test_failing_attacks_are_recorded_by_name_and_every_other_attack_kept(tmp_path, register):
    for name, cls in BROKEN_ATTACKS.items():
        register(ATTACKS, name, cls)
    out = tmp_path / "run"
    code, printed, err = _main(["run", "--defense", "identity", "--attacks", ",".join(BROKEN_ATTACKS) + ",random_guess",
                                "--out", str(out), *SMOKE])
    assert code == 3, err
    result = read_result(out)  # written, and valid under the schema
    assert isinstance(result.attacks["random_guess"], AttackResult)
    expected = {
        "a_raises": r"attack 'a_raises' raised ValueError in attack\(\): boom \(at .*test_plugin_isolation\.py:\d+ "
                    r"in attack\)",
        "a_fit_raises": r"attack 'a_fit_raises' raised RuntimeError in fit\(\): cannot train",
        "a_float": r"attack\(\) must return an AttackResult .*; it returned float 0\.5",
        "a_range": r"empirical_privacy must lie in \[0, 1\] .*got 1\.7 \[1\.6, 1\.8\].*bounded=False",
        "a_undeclared": r"undeclared 'my_secret_metric'",
        "a_metric_type": r"must return an Estimate for 'token_accuracy'; it returned float 0\.3",
    }
    for name, pattern in expected.items():
        outcome = result.attacks[name]
        assert isinstance(outcome, AttackFailure), name
        assert re.search(pattern, outcome.message), (name, outcome.message)
        assert f"  {name}: " in err
    assert "6 attack(s) failed" in err and "a_raises" in printed and "failed" in printed
    doc = json.loads((out / "result.json").read_text(encoding="utf-8"))
    assert set(doc["attacks"]["a_raises"]) == {"failed"}


def test_a_cell_whose_attack_failed_runs_again_once_the_plugin_is_fixed(tmp_path, register):
    register(ATTACKS, "flaky", RaisesInAttack)
    argv = ["run", "--defense", "identity", "--attacks", "flaky", "--out", str(tmp_path / "run"), *SMOKE]
    assert _main(argv)[0] == 3
    ATTACKS.remove("flaky")
    register(ATTACKS, "flaky", _Attack)  # the author fixed the plugin: the same command measures it
    code, _, err = _main(argv)
    assert code == 0, err
    assert isinstance(read_result(tmp_path / "run").attacks["flaky"], AttackResult)


def test_a_sweep_names_the_cell_of_each_failed_attack(tmp_path, register):
    register(ATTACKS, "flaky", RaisesInAttack)
    argv = ["run", "--defense", "identity", "--attacks", "flaky,random_guess", "--sweep", "seed=1,2",
            "--out", str(tmp_path / "sweep"), *SMOKE]
    code, _, err = _main(argv)
    assert code == 3, err
    assert "2 attack(s) failed" in err and "  seed=1: flaky: " in err and "  seed=2: flaky: " in err


@pytest.mark.parametrize(("cls", "message"), [
    (DefenseRaises, r"defense 'broken_defense' raised KeyError in fit\(\): 'no such table' \(at .*"
                    r"test_plugin_isolation\.py:\d+ in fit\)"),
    (DefenseReleasesList, r"defense 'broken_defense' broke its contract: release\(\) must return a rapt_audit "
                          r"Release; it returned list"),
    (DefenseReleasesNumbers, r"release\(\) must return texts that are strings; it returned a text of type int 0"),
])
def test_a_failing_defense_stops_the_run_naming_the_plugin(tmp_path, register, cls, message):
    register(DEFENSES, "broken_defense", cls)
    code, _, err = _main(["run", "--defense", "broken_defense", "--attacks", "random_guess",
                          "--out", str(tmp_path / "run"), *SMOKE])
    assert code == 2 and re.search(message, err), err
    assert "Traceback" not in err and not (tmp_path / "run" / "result.json").exists()


def test_an_error_of_the_release_cache_is_not_blamed_on_the_defense(warm_cache, monkeypatch):
    """Only the defense's own release is checked and named as the defense's: a store that cannot write
    (a full disk) stays the cache's error, never "defense 't2t' raised OSError in release()"."""
    from rapt_audit.api.errors import PluginError
    from rapt_audit.pipeline import cache
    from rapt_audit.pipeline.config import RunConfig
    from rapt_audit.pipeline.runner import compute

    def full_disk(self, key, release):
        raise OSError(28, "No space left on device")

    monkeypatch.setenv("RAPT_AUDIT_CACHE", str(warm_cache))
    monkeypatch.setattr(cache.ReleaseStore, "save", full_disk)
    with pytest.raises(OSError, match="No space left") as caught:
        compute(RunConfig(defense="t2t", attacks="random_guess", profile="smoke", dataset="synthetic",
                          defense_args={"eta": 75}, data_args=TINY_SPLITS))
    assert not isinstance(caught.value, PluginError)


def test_an_in_process_sweep_marks_a_failing_cell_and_goes_on(tmp_path, register):
    register(DEFENSES, "broken_defense", DefenseRaises)
    out = tmp_path / "sweep"
    code, _, err = _main(["run", "--attacks", "random_guess", "--sweep", "defense=broken_defense,identity",
                          "--out", str(out), *SMOKE])
    assert code == 2 and "1 of 2 cells failed" in err and "defense 'broken_defense' raised KeyError" in err
    status = {c["name"]: c for c in json.loads((out / "sweep.json").read_text(encoding="utf-8"))["cells"]}
    assert status["defense=broken_defense"]["status"] == "failed"
    assert "broken_defense" in status["defense=broken_defense"]["error"]
    assert status["defense=identity"]["status"] == "complete"
    assert isinstance(read_result(out / "defense=identity").attacks["random_guess"], AttackResult)


# ---------------------------------------------------------------- point 4: readers of a failed attack


def _with_failure(**kw: Any) -> Any:
    result = fake_result(**kw)
    result.attacks["whitebox"] = AttackFailure("attack 'whitebox' raised ValueError in attack(): <b>boom</b>")
    return result


def test_reports_show_a_failed_attack_as_failed_never_as_a_number(tmp_path):
    write_result(_with_failure(), tmp_path / "a")
    coll = collect([tmp_path])
    html = build_report(coll).html
    assert "failed: <span class=\"why\">attack &#x27;whitebox&#x27; raised ValueError" in html
    assert "<b>boom</b>" not in html  # the message is escaped like every text from a result
    md = render_leaderboard(coll)
    assert "failed\\: attack 'whitebox' raised ValueError" in md and "&lt;b&gt;boom&lt;/b&gt;" in md  # escaped
    frame = rapt_audit.load(tmp_path)
    row = frame[(frame["attack"] == "whitebox") & (frame["kind"] == "privacy")].iloc[0]
    assert math.isnan(row["value"]) and row["failed"].startswith("attack 'whitebox' raised")
    table = rapt_audit.summarize(tmp_path)
    assert table[table["attack"] == "whitebox"].iloc[0]["failed"].startswith("attack 'whitebox'")


def test_the_gate_fails_when_a_measured_attack_now_fails():
    base, now = fake_result(), _with_failure()
    comparisons = [c for c in compare_runs(base, now) if c.attack == "whitebox"]
    assert comparisons and all(c.status == "failed" for c in comparisons)
    assert "raised ValueError" in str(comparisons[0].new)


def test_the_gate_command_exits_1_on_a_failed_attack(tmp_path):
    write_result(fake_result(), tmp_path / "base")
    write_result(_with_failure(), tmp_path / "now")
    assert _main(["check", "--baseline", str(tmp_path / "b.json"), "--write-baseline", str(tmp_path / "base")])[0] == 0
    code, printed, err = _main(["check", "--baseline", str(tmp_path / "b.json"), str(tmp_path / "now")])
    assert code == 1 and "FAILED" in printed and "now failed: attack 'whitebox' raised" in err


# ---------------------------------------------------------------- point 4 and 5: entry points


class _Dist:
    def __init__(self, name: str, version: str) -> None:
        self.name, self.version = name, version


class _EntryPoint:
    def __init__(self, name: str, value: str, obj: Any = None, error: Exception | None = None,
                 dist: _Dist | None = None) -> None:
        self.name, self.value, self.obj, self.error, self.dist = name, value, obj, error, dist

    def load(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.obj


@pytest.fixture
def entry_points(monkeypatch):
    """``entry_points(defenses=[...], attacks=[...])``: the installed entry points, reloaded; removed after."""
    monkeypatch.setattr(plugins, "_registered", {}, raising=False)
    monkeypatch.setattr(plugins, "_distributions", {}, raising=False)
    names: list[str] = []

    def install(defenses: tuple = (), attacks: tuple = ()) -> None:
        groups = {"rapt_audit.defenses": list(defenses), "rapt_audit.attacks": list(attacks)}
        names.extend(ep.name for ep in (*defenses, *attacks))
        monkeypatch.setattr(plugins, "_loaded", False)
        monkeypatch.setattr(plugins, "entry_points", lambda group: groups.get(group, []))

    yield install
    for name in names:
        if name not in ("t2t",):
            DEFENSES.remove(name)
            ATTACKS.remove(name)


def test_an_entry_point_that_fails_to_load_is_a_warning_naming_it(tmp_path, entry_points):
    entry_points(attacks=[_EntryPoint("ghost", "missing_pkg.mod:Ghost",
                                      error=ModuleNotFoundError("No module named 'missing_pkg'"))])
    code, printed, err = _main(["ls", "attacks"])  # listed from its entry point: nothing imported, nothing to warn
    assert code == 0 and "random_guess" in printed and "(not imported: missing_pkg.mod:Ghost;" in printed
    assert "warning" not in err
    code, printed, err = _main(["ls", "attacks", "--params"])  # --params imports the plugins: then the warning
    assert code == 0 and "random_guess" in printed and "ghost" not in printed
    assert ("rapt-audit: warning: attack plugin entry point 'ghost' = 'missing_pkg.mod:Ghost' failed to load: "
            "ModuleNotFoundError: No module named 'missing_pkg'") in err
    code, _, err = _main(["run", "--defense", "identity", "--attacks", "random_guess", "--dry-run", *SMOKE])
    assert code == 0, err
    code, _, err = _main(["run", "--defense", "identity", "--attacks", "ghost", "--dry-run", *SMOKE])
    assert code == 2 and "attack 'ghost' is installed but could not be loaded" in err
    write_result(fake_result(), tmp_path / "a")
    assert len(rapt_audit.load(tmp_path)) > 0  # reading results does not need the broken plugin


def test_an_entry_point_named_like_a_builtin_is_an_error_naming_both(entry_points):
    entry_points(defenses=[_EntryPoint("t2t", "other_pkg.mod:T2T", obj=_Defense, dist=_Dist("other-pkg", "2.0"))])
    code, _, err = _main(["ls"])
    assert code == 2
    assert "entry point 't2t' = 'other_pkg.mod:T2T' of other-pkg 2.0" in err
    assert "clashes with the defense 't2t' already registered (" in err and "built in" in err
    assert "rename the entry point in other-pkg's pyproject.toml" in err


class PlainDefense:
    """Not a dataclass: its parameters cannot be read."""

    exposes = frozenset({"texts"})

    def fit(self, train: Any, *, ctx: Any) -> Any:
        return self

    def utility(self, test: Any, *, ctx: Any) -> Any:
        return {}

    def release(self, records: Any, *, ctx: Any) -> Any:
        raise NotImplementedError


def test_a_plain_class_entry_point_is_refused_with_a_clear_message(entry_points):
    entry_points(defenses=[_EntryPoint("plain", "pkg.mod:PlainDefense", obj=PlainDefense)])
    code, printed, err = _main(["ls", "defenses", "--params"])
    assert code == 0 and "plain" not in printed.split() and "PlainDefense is not a dataclass" in err
    code, _, err = _main(["run", "--defense", "plain", "--attacks", "random_guess", "--dry-run", *SMOKE])
    assert code == 2 and "defense 'plain' is installed but could not be loaded" in err and "@dataclass" in err
    assert "Traceback" not in err


@dataclass
class WordOverlap(_Attack):
    """Share of the original's words found verbatim."""

    tags: ClassVar[tuple[str, ...]] = ("lexical",)


def test_entry_point_plugins_keep_their_tags_and_record_their_version(entry_points):
    entry_points(attacks=[_EntryPoint("word_overlap", "wo_pkg.mod:WordOverlap", obj=WordOverlap,
                                      dist=_Dist("wo-pkg", "0.3.1"))])
    plugins.load()
    assert ATTACKS.select("tag:lexical") == ["word_overlap"]
    assert environment()["versions"]["wo-pkg"] == "0.3.1"
    code, printed, _ = _main(["ls", "attacks"])
    assert code == 0 and "(tags: lexical) (from wo-pkg 0.3.1)" in printed


def test_ls_lists_an_entry_point_from_its_metadata_without_importing_it(entry_points):
    class NotToBeImported(_EntryPoint):
        def load(self) -> Any:
            raise AssertionError("ls imported the plugin's module")

    entry_points(attacks=[NotToBeImported("heavy_attack", "heavy_pkg.mod:Heavy", dist=_Dist("heavy-pkg", "1.2"))])
    code, printed, err = _main(["ls", "attacks"])
    assert code == 0, err
    line = next(line for line in printed.splitlines() if "heavy_attack" in line)
    assert "(not imported: heavy_pkg.mod:Heavy; --params imports it) (from heavy-pkg 1.2)" in line
    assert not plugins._loaded and "heavy_attack" not in ATTACKS
    code, printed, _ = _main(["ls"])  # the metrics section says their metrics may be missing
    assert code == 0 and "plugins not imported may declare more: rapt-audit ls metrics imports them" in printed


# ---------------------------------------------------------------- point 5: parameters, unbounded measures


def test_ls_params_lists_types_defaults_and_ranges():
    code, printed, _ = _main(["ls", "defenses", "--params"])
    assert code == 0
    assert "      eta: float = 100.0  (Validates the dχ-privacy parameter eta" in printed
    assert "      dropout: float = 0.4  (must lie in [0, 1))" in printed
    code, printed, _ = _main(["ls", "attacks", "--params"])
    assert code == 0 and "      topk: int = 5  (must be >= 2)" in printed


def _mse_result(seed: int, value: float) -> Any:
    result = fake_result(privacy={"random_guess": 0.95}, seed=seed)
    mse = Estimate(value, value - 0.03, value + 0.03, 100, "bootstrap-percentile")
    result.attacks["ae_inversion"] = AttackResult(mse, {"reconstruction_mse": mse})
    return result


def test_a_privacy_measure_outside_0_1_is_labelled_as_such(tmp_path):
    write_result(_mse_result(0, 1.19), tmp_path / "s0")
    write_result(_mse_result(1, 1.21), tmp_path / "s1")
    coll = collect([tmp_path])
    md = render_leaderboard(coll)
    assert "| ae_inversion ↑ (reconstruction_mse) |" in md
    assert "Not 1 − attack success: `ae_inversion` reports reconstruction_mse" in md
    assert "(not in \\[0, 1\\])" in md  # brackets escaped like every text from a declaration
    report = build_report(coll)
    assert "Not 1 − attack success:" in report.html and "reconstruction_mse" in report.html
    combined = report.groups[0].rows[0].privacy["ae_inversion"]
    assert combined.ci_high > 1.0  # two seeds combined, never clipped to [0, 1]


# ---------------------------------------------------------------- point 6: the small things


def test_attacks_minus_a_name_works_with_a_space():
    code, printed, err = _main(["run", "--defense", "identity", "--attacks", "-ner_adaptive", "--dry-run", *SMOKE])
    assert code == 0, err
    to_run = next(line for line in printed.splitlines() if line.startswith("attacks"))
    assert "ner_adaptive" not in to_run and "random_guess" in to_run


def test_dry_run_says_an_attribute_attack_is_skipped_on_data_without_the_attribute(tmp_path):
    rows = ["review,stars"] + [f"the shop number {i} was {('good', 'bad')[i % 2]},{i % 2 + 1}" for i in range(60)]
    path = tmp_path / "reviews.csv"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    code, printed, err = _main(["run", "--defense", "identity", "--attacks", "attribute_age,random_guess",
                                "--dataset", str(path), "--set", "data.text=review", "--set", "data.label=stars",
                                "--profile", "smoke", "--dry-run"])
    assert code == 0, err
    assert "1 to run: random_guess" in printed
    assert "skipped: attribute_age: the attacker's records carry no 'age' attribute (attributes present: none)" in printed


def test_a_plugin_defense_joins_the_builtins_table_and_a_plugin_attack_names_its_version(register, warm_cache,
                                                                                         monkeypatch):
    """Issue #42: a third-party defense's version is its row's provenance, not part of the signature that groups
    rows (its rows sat alone, and installing it split the built-ins' table); a third-party attack's version stays
    in it, since it changes every row's numbers."""
    from rapt_audit.pipeline.config import RunConfig
    from rapt_audit.pipeline.runner import compute

    plugins.load()
    keeper = dataclass(type("Keeper", (DEFENSES.get("embedding"),), {}))
    probe = dataclass(type("Probe", (ATTACKS.get("random_guess"),), {}))
    register(DEFENSES, "keeper", keeper, origin="rapt-audit-keeper 0.3.1")
    register(ATTACKS, "probe", probe, origin="rapt-audit-probe 2.0")
    monkeypatch.setenv("RAPT_AUDIT_CACHE", str(warm_cache))
    runs = {name: compute(RunConfig(defense=name, attacks="random_guess,probe", profile="smoke", dataset="synthetic",
                                    defense_args={"eta": 50, "method": "probe"},  # no service training
                                    data_args=TINY_SPLITS))
            for name in ("embedding", "keeper")}
    assert runs["keeper"].signature == runs["embedding"].signature  # one table
    assert "plugins:rapt-audit-probe=2.0" in runs["keeper"].signature and "keeper" not in runs["keeper"].signature
    assert runs["keeper"].defense["origin"] == "rapt-audit-keeper 0.3.1" and "origin" not in runs["embedding"].defense

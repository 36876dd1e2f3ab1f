"""Issue #62 item 2, the pipeline's side: a stale cell re-runs only its stale stages and reuses the rest.

A first run measures a cell; then the code "here" is made to differ from the stored digests in one attack, in
the defense or in the core (by patching what :mod:`rapt_audit.pipeline.stage_reuse` computes them with), and
the cell is run again into the same folder. Spies count the defense's and each attack's calls; the numbers a
reused stage keeps are those the first run wrote, and those re-measured come out the same (one seed, one
number). Last, the invariant the reuse of a stored utility rests on: a defense's release after ``fit`` alone
is its release after ``fit`` and ``utility``.
"""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from rapt_audit.api.components import CellCode
from rapt_audit.api.plugins import ATTACKS, DEFENSES, load_builtins
from rapt_audit.cli import main
from rapt_audit.pipeline import runner, stage_reuse
from tests.sweep_files import TINY

ATTACKED = ("random_guess", "whitebox")
RUN = ["run", "--defense", "identity", "--attacks", ",".join(ATTACKED), "--profile", "smoke", "--quiet",
       "--dataset", "synthetic", *TINY]

#: The calls the spies of this process counted ("defense.fit", "defense.utility", "attack.NAME.fit").
CALLS: Counter[str] = Counter()


def _spy(cls, method: str, key: str, patch) -> None:
    real = getattr(cls, method)

    def counted(self, *args, **kwargs):
        CALLS[key] += 1
        return real(self, *args, **kwargs)

    patch.setattr(cls, method, counted)


def _install_spies(patch, defense: str = "identity") -> None:
    load_builtins()
    _spy(DEFENSES.entry(defense).obj, "fit", "defense.fit", patch)
    _spy(DEFENSES.entry(defense).obj, "utility", "defense.utility", patch)
    for name in ATTACKED:
        _spy(ATTACKS.entry(name).obj, "fit", f"attack.{name}.fit", patch)


@pytest.fixture
def spies(monkeypatch):
    """The spies, counting from zero."""
    _install_spies(monkeypatch)
    CALLS.clear()
    return CALLS


def _changed(monkeypatch, *, attack: str | None = None, defense: bool = False, core: bool = False) -> None:
    """Make the code here differ from the stored cells' in one attack, in the defense or in the core."""
    real = stage_reuse.current_code

    def upgraded(name, attacks):
        here = real(name, attacks)
        return CellCode(core="c0c0c0c0" * 2 if core else here.core, defense="feedface" * 2 if defense else here.defense,
                        attacks={**here.attacks, **({attack: "0123abcd" * 2} if attack else {})}, package=here.package)

    monkeypatch.setattr(stage_reuse, "current_code", upgraded)


def _doc(out):
    return json.loads((out / "result.json").read_text())


def _measured(doc):
    """What a re-run must keep equal: the numbers, the release's facts and the settings."""
    return {"utility": doc["utility"], "attacks": doc["attacks"], "release_meta": doc["defense"]["release_meta"],
            "cell_id": doc["cell_id"]}


@pytest.fixture
def first(tmp_path, spies):
    """A cell measured once: its folder and its result; the spies then count from zero."""
    out = tmp_path / "run"
    assert main([*RUN, "--out", str(out)]) == 0
    assert spies == {"defense.fit": 1, "defense.utility": 1, "attack.random_guess.fit": 1, "attack.whitebox.fit": 1}
    assert "reused_stages" not in _doc(out)["env"] and set(_doc(out)["env"]["code"]["attacks"]) == set(ATTACKED)
    spies.clear()
    return out, _doc(out)


def test_a_changed_attack_reruns_only_that_attack(first, spies, monkeypatch, capsys):
    out, before = first
    _changed(monkeypatch, attack="whitebox")
    assert main([*RUN, "--out", str(out)]) == 0
    # fit always runs (the release and the adaptive releases need the fitted defense); utility is kept.
    assert spies == {"defense.fit": 1, "attack.whitebox.fit": 1}
    after = _doc(out)
    assert _measured(after) == _measured(before)
    assert after["env"]["reused_stages"] == ["utility", "attack.random_guess"]
    assert after["env"]["code"]["attacks"]["whitebox"] == "0123abcd" * 2
    for stage in ("defense.utility", "attack.random_guess.fit", "attack.random_guess"):  # the stored seconds
        assert after["env"]["timings_s"][stage] == before["env"]["timings_s"][stage]
    assert "worst_case" in after["attacks"]
    assert after["signature"] != before["signature"]  # an attack's code is the table's: its code: moved


def test_a_changed_defense_reruns_its_utility_and_every_attack(first, spies, monkeypatch):
    out, before = first
    _changed(monkeypatch, defense=True)
    assert main([*RUN, "--out", str(out)]) == 0
    assert spies == {"defense.fit": 1, "defense.utility": 1, "attack.random_guess.fit": 1, "attack.whitebox.fit": 1}
    after = _doc(out)
    assert "reused_stages" not in after["env"] and _measured(after) == _measured(before)
    assert after["signature"] == before["signature"]  # a defense's code is its row's, not the table's


def test_a_changed_core_reruns_everything(first, spies, monkeypatch):
    out, _ = first
    _changed(monkeypatch, core=True)
    assert main([*RUN, "--out", str(out)]) == 0
    assert spies == {"defense.fit": 1, "defense.utility": 1, "attack.random_guess.fit": 1, "attack.whitebox.fit": 1}
    assert "reused_stages" not in _doc(out)["env"]


def test_unchanged_code_reuses_the_cell_whole_and_force_runs_it_all(first, spies, monkeypatch):
    out, _ = first
    stored = (out / "result.json").read_bytes()
    assert main([*RUN, "--out", str(out)]) == 0
    assert spies == {} and (out / "result.json").read_bytes() == stored
    _changed(monkeypatch, attack="whitebox")
    assert main([*RUN, "--out", str(out), "--force"]) == 0
    assert spies == {"defense.fit": 1, "defense.utility": 1, "attack.random_guess.fit": 1, "attack.whitebox.fit": 1}
    assert "reused_stages" not in _doc(out)["env"]


def _as_legacy(out, code: str) -> None:
    """Rewrite the stored result as a cell signed before issue #62 with the one digest ``code``."""
    doc = _doc(out)
    doc["env"].pop("code", None)
    doc["signature"] = "|".join(f"code:{code}" if p.startswith("code:") else p for p in doc["signature"].split("|"))
    (out / "result.json").write_text(json.dumps(doc))


def test_a_legacy_cell_of_other_code_runs_again_whole_and_of_this_code_is_reused(first, spies):
    out, before = first
    _as_legacy(out, stage_reuse.current_code("identity", ATTACKED).package[:8])  # its one digest is the package's
    legacy = (out / "result.json").read_bytes()
    assert main([*RUN, "--out", str(out)]) == 0
    assert spies == {} and (out / "result.json").read_bytes() == legacy
    _as_legacy(out, "6b24379f")  # another code's: all of it is stale
    assert main([*RUN, "--out", str(out)]) == 0
    assert spies == {"defense.fit": 1, "defense.utility": 1, "attack.random_guess.fit": 1, "attack.whitebox.fit": 1}
    after = _doc(out)
    assert "reused_stages" not in after["env"] and "code" in after["env"] and _measured(after) == _measured(before)


def test_a_sweep_reruns_only_the_stale_attack_of_each_stale_cell(tmp_path, spies, monkeypatch):
    out = tmp_path / "sweep"
    argv = [*RUN, "--sweep", "seed=1,2", "--out", str(out)]
    assert main(argv) == 0
    before = {p.parent.name: json.loads(p.read_text()) for p in out.glob("*/result.json")}
    spies.clear()
    _changed(monkeypatch, attack="random_guess")
    assert main(argv) == 0
    assert spies == {"defense.fit": 2, "attack.random_guess.fit": 2}
    for path in out.glob("*/result.json"):
        after = json.loads(path.read_text())
        assert after["env"]["reused_stages"] == ["utility", "attack.whitebox"]
        assert _measured(after) == _measured(before[path.parent.name])


# ---------------------------------------------------------------- --jobs 2: the stages travel to the worker


def counting_compute(config, *, reused=None, **kwargs):
    """A worker's compute that counts the calls of that process's spies and records them in ``env`` (free-form)."""
    with pytest.MonkeyPatch.context() as patch:
        _install_spies(patch, config.defense)
        CALLS.clear()
        result = runner.compute(config, reused=reused, **kwargs)
        result.env["calls"] = dict(CALLS)
    return result


def test_jobs_2_hands_each_worker_the_stages_to_reuse(tmp_path, monkeypatch):
    out = tmp_path / "sweep"
    argv = [*RUN, "--sweep", "seed=1,2", "--jobs", "2", "--out", str(out)]
    monkeypatch.setattr(runner, "compute", counting_compute)  # the workers import it by name from this module
    assert main(argv) == 0
    before = {p.parent.name: json.loads(p.read_text()) for p in out.glob("*/result.json")}
    assert all(d["env"]["calls"]["defense.utility"] == 1 for d in before.values())
    _changed(monkeypatch, attack="whitebox")  # in the driver, which decides what is stale and what is handed on
    assert main(argv) == 0
    for path in out.glob("*/result.json"):
        after = json.loads(path.read_text())
        assert after["env"]["calls"] == {"defense.fit": 1, "attack.whitebox.fit": 1}, path
        assert after["env"]["reused_stages"] == ["utility", "attack.random_guess"]
        assert _measured(after) == _measured(before[path.parent.name])


# ---------------------------------------------------------------- the invariant the reuse of utility rests on


def _release_of(name: str, *, utility: bool, cache_dir) -> dict:
    """What the defense ``name`` (smoke profile, synthetic data, a fresh run context) releases of the victim's
    test records and the attacker's training records after ``fit`` and, when ``utility``, its utility."""
    from rapt_audit.pipeline.config import RunConfig
    from rapt_audit.pipeline.context import RunContext

    checked = runner._prepare(RunConfig(defense=name, attacks="random_guess", profile="smoke", dataset="synthetic",
                                        device="cpu", release_cache=False))
    ctx = RunContext(seed=0, profile="smoke", device="cpu", precision="fp32", cache_dir=cache_dir)
    defense, splits = checked.defense, checked.splits
    defense.fit(splits.victim_train, ctx=ctx)
    if utility:
        defense.utility(splits.victim_test, ctx=ctx)
    return {part: defense.release(records, ctx=ctx)
            for part, records in (("victim_test", splits.victim_test), ("attacker", splits.attacker_train))}


def _same(a, b) -> bool:
    def arrays(x):
        return [] if x is None else [np.asarray(v) for v in x]

    return (a.uids == b.uids and a.texts == b.texts
            and len(arrays(a.token_embeddings)) == len(arrays(b.token_embeddings))
            and all(np.array_equal(x, y) for x, y in zip(arrays(a.token_embeddings), arrays(b.token_embeddings)))
            and (a.sequence_embeddings is None) == (b.sequence_embeddings is None)
            and (a.sequence_embeddings is None or np.array_equal(a.sequence_embeddings, b.sequence_embeddings)))


load_builtins()


@pytest.mark.slow
@pytest.mark.parametrize("name", DEFENSES.names())
def test_a_release_after_fit_alone_is_the_release_after_fit_and_utility(name, warm_pos_cache):
    """A stale attack re-runs on a defense that was fitted but whose utility was not measured again; its
    releases (the victim's, and the adaptive attacker's) must be those of the run that measured utility.

    Their facts may differ only by the service's customization, which utility sets and the runner then
    takes from the stored result (``defense.release_meta``); no attack reads it.
    """
    from rapt_audit.api.params import to_jsonable

    without = _release_of(name, utility=False, cache_dir=warm_pos_cache)
    with_utility = _release_of(name, utility=True, cache_dir=warm_pos_cache)
    for part in without:
        assert _same(without[part], with_utility[part]), f"{name}: the {part} release depends on utility"
        a, b = to_jsonable(dict(without[part].meta)), to_jsonable(dict(with_utility[part].meta))
        assert {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)} <= {"customization"}, name

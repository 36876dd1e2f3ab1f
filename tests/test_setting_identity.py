"""One setting, one cell (issue #60): equal settings spelled differently make one cell id, one sweep cell, one seed.

``--defense t2t`` (η defaults to 100) and ``--set eta=1e2`` are the same run; before, they made two cell ids and
the leaderboard averaged the two copies of one run as if they were independent seeds.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from rapt_audit.api.errors import ResultError, UsageError
from rapt_audit.cli import main
from rapt_audit.pipeline.config import RunConfig, build_config
from rapt_audit.pipeline.results import write_result
from rapt_audit.pipeline.runner import check_out_dir
from rapt_audit.pipeline.sweep import expand, parse_axes
from rapt_audit.reporting.collect import collect
from rapt_audit.reporting.summary import DuplicateRunWarning, group_results
from tests.result_factory import fake_result

OMITTED = object()  # the parameter left out: the run uses its default

#: (defense, profile, attacks, parameter, spellings of one value). Floats, infinity, ints, bools, strings, Literal
#: values, a profile-dependent default (cape's smoke epochs) and an attack parameter.
EQUAL = [
    ("t2t", "cpu", "random_guess", "eta", [OMITTED, 100, 1e2, 100.0, "100", "1e2", "100.0", "1.0e+2", " 100 "]),
    ("t2t", "cpu", "random_guess", "eta", [math.inf, "inf", " inf"]),
    ("vickrey", "cpu", "random_guess", "t", [OMITTED, 0.5, "0.5", ".5", "5e-1", "0.50"]),
    ("t2t", "cpu", "random_guess", "epochs", [3, "3", " 3", "03"]),
    ("embedding", "cpu", "random_guess", "decode_nearest", [OMITTED, False, "false", "no", "off", "0", "False"]),
    ("t2t", "cpu", "random_guess", "unit", [OMITTED, "token", " token"]),
    ("t2t", "cpu", "random_guess", "unk_policy", [OMITTED, "privatize"]),
    ("cape", "smoke", "random_guess", "epochs", [OMITTED, 3, "3"]),
    ("t2t", "cpu", "whitebox", "attacks.whitebox.topk", [OMITTED, 5, "5", " 5"]),
]


def config_with(defense: str, profile: str, attacks: str, key: str, value: object, *, as_text: bool) -> RunConfig:
    """The run ``--defense D --profile P --attacks A [--set key=value]``, from the command line or in Python."""
    cli = {"defense": defense, "profile": profile, "attacks": attacks, "dataset": "synthetic"}
    if value is OMITTED:
        return build_config(cli=cli)
    if as_text:
        return build_config(cli=cli, sets=[f"{key}={value}"])
    base = build_config(cli=cli)
    if key.startswith("attacks."):
        _, attack, param = key.split(".")
        return replace(base, attack_args={attack: {param: value}})
    return replace(base, defense_args={key: value})


@settings(derandomize=True, deadline=None, max_examples=40)
@given(case=st.sampled_from(EQUAL), data=st.data())
def test_equal_spellings_make_one_cell_id(case, data):
    defense, profile, attacks, key, spellings = case
    a, b = data.draw(st.sampled_from(spellings)), data.draw(st.sampled_from(spellings))
    first = config_with(defense, profile, attacks, key, a, as_text=data.draw(st.booleans()))
    second = config_with(defense, profile, attacks, key, b, as_text=data.draw(st.booleans()))
    assert first.cell_id() == second.cell_id(), (a, b)
    assert second.matches(first.to_dict())


#: (defense, parameter, strategy of values): different values must stay different cells.
DIFFERENT = [
    ("t2t", "eta", st.one_of(st.floats(min_value=0.01, max_value=1e6), st.just(math.inf))),
    ("vickrey", "t", st.floats(min_value=0.0, max_value=1.0)),
    ("t2t", "epochs", st.integers(min_value=1, max_value=50)),
    ("embedding", "decode_nearest", st.booleans()),
    ("t2t", "unit", st.sampled_from(["token", "word"])),
]


@settings(derandomize=True, deadline=None, max_examples=40)
@given(case=st.sampled_from(DIFFERENT), data=st.data())
def test_different_values_make_different_cell_ids(case, data):
    defense, key, values = case
    a, b = data.draw(values), data.draw(values)
    if a == b:
        return
    first = config_with(defense, "cpu", "random_guess", key, a, as_text=False)
    second = config_with(defense, "cpu", "random_guess", key, str(b), as_text=True)
    assert first.cell_id() != second.cell_id(), (a, b)
    assert not second.matches(first.to_dict())


def test_other_run_settings_still_make_other_cells():
    base = config_with("t2t", "cpu", "random_guess", "eta", OMITTED, as_text=True)
    assert len({base.cell_id(), replace(base, seed=1).cell_id(), replace(base, profile="smoke").cell_id(),
                replace(base, defense="pct2t").cell_id(), replace(base, attacks="whitebox").cell_id()}) == 5


def test_a_sweep_that_holds_one_setting_twice_is_refused_naming_the_values(tmp_path):
    cli = {"defense": "t2t", "profile": "smoke", "attacks": "random_guess", "dataset": "synthetic"}
    with pytest.raises(UsageError) as info:
        expand(axes=parse_axes(["eta=100,1e2,100.0,50"]), file=None, cli=cli, sets=[], out=tmp_path / "s")
    message = str(info.value)
    assert "eta=100" in message and "eta=1e2" in message and "eta=100.0" in message and "eta=50" not in message
    assert "\n" not in message and "once" in message
    with pytest.raises(UsageError, match="more than once"):
        parse_axes(["seed=0,0"])
    with pytest.raises(UsageError, match="seed=0.*seed=00"):
        expand(axes=parse_axes(["seed=0,00"]), file=None, cli=cli, sets=[], out=tmp_path / "s")
    # Values that differ stay cells of their own.
    cells = expand(axes=parse_axes(["eta=100,50"]), file=None, cli=cli, sets=[], out=tmp_path / "s")
    assert len({c.config.cell_id() for c in cells}) == 2


def _stored(config: RunConfig, *, value: float):
    """A result as a run of ``config`` writes it, its defense arguments kept as given (strings, today's form)."""
    result = fake_result(eta=100.0, privacy={"whitebox": value})
    return replace(result, config=config.to_dict(), cell_id=config.cell_id())


def test_leaderboard_of_one_run_spelled_two_ways_counts_it_once(tmp_path, capsys):
    cli = {"defense": "t2t", "profile": "smoke", "attacks": "whitebox", "dataset": "synthetic"}
    plain, spelled = build_config(cli=cli), build_config(cli=cli, sets=["eta=1e2"])
    a, b = tmp_path / "A", tmp_path / "B"
    write_result(_stored(plain, value=0.30), a)
    # The copy as today's code wrote it: another cell id, the same setting.
    write_result(replace(_stored(spelled, value=0.50), cell_id="0123456789ab"), b)
    with pytest.warns(DuplicateRunWarning) as caught:
        groups = group_results(collect([a, b]).results)
    message = str(caught[0].message)
    assert str(a / "result.json") in message and str(b / "result.json") in message and "\n" not in message
    (row,) = groups[0].rows
    assert len(row.runs) == 1 and row.seeds == [0]
    out = tmp_path / "lb.md"
    assert main(["leaderboard", str(a), str(b), "-o", str(out)]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "holds the same run as" in line]
    assert len(said) == 1 and said[0].startswith("rapt-audit: warning: ")  # one line, as the command's own
    md = out.read_text(encoding="utf-8")
    line = next(line for line in md.splitlines() if line.startswith("| t2t |"))
    assert "0.300 [0.280, 0.320]" in line  # A's own interval, not a mean of two copies


def test_seeds_of_one_setting_are_still_combined(tmp_path):
    cli = {"defense": "t2t", "profile": "smoke", "attacks": "whitebox", "dataset": "synthetic"}
    for seed in (0, 1):
        config = build_config(cli={**cli, "seed": seed}, sets=["eta=1e2"] if seed else [])
        write_result(replace(_stored(config, value=0.3 + seed / 10), env={"seed": seed}), tmp_path / f"s{seed}")
    (row,) = group_results(collect([tmp_path]).results)[0].rows
    assert row.seeds == [0, 1]


def test_an_old_style_stored_result_is_still_this_exact_run(tmp_path):
    cli = {"defense": "vickrey", "profile": "smoke", "attacks": "random_guess", "dataset": "synthetic"}
    config = build_config(cli=cli, sets=["epsilon=0.1", "t=0"])
    stored = replace(_stored(config, value=0.3), cell_id="0123456789ab")  # today's id: not today's hash
    stored.config["defense_args"] = {"epsilon": "0.1", "t": "0"}  # as committed results hold them
    write_result(stored, tmp_path / "old")
    assert check_out_dir(tmp_path / "old", config) is not None
    respelled = build_config(cli=cli, sets=["epsilon=1e-1", "t=0.0"])
    assert check_out_dir(tmp_path / "old", respelled) is not None
    other = build_config(cli=cli, sets=["epsilon=0.2", "t=0"])
    with pytest.raises(ResultError, match="different run"):
        check_out_dir(tmp_path / "old", other)

"""Configuration precedence, --set parsing and typed plugin parameters."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal

import pytest

from rapt_audit.api.errors import UnknownNameError, UsageError
from rapt_audit.api.params import coerce, get_params, make_plugin
from rapt_audit.api.registry import Registry
from rapt_audit.pipeline.config import build_config, parse_set, profile_split_sizes


def test_precedence_defaults_file_cli_set(tmp_path):
    file = tmp_path / "run.toml"
    file.write_text('defense = "t2t"\nseed = 3\nprofile = "smoke"\n[defense_args]\neta = 50\n', encoding="utf-8")
    config = build_config(file=file, cli={"seed": 5}, sets=["eta=75", "data.victim_test=40"])
    assert config.defense == "t2t"          # file beats default
    assert config.seed == 5                 # CLI beats file
    assert config.profile == "smoke"        # file kept where CLI is silent
    assert config.defense_args == {"eta": "75"}  # --set beats file; typed when the plugin is built
    assert config.data_args == {"victim_test": 40}
    assert build_config().profile == "cpu" and build_config().attacks == "all"


def test_unknown_keys_name_the_valid_ones(tmp_path):
    file = tmp_path / "run.json"
    file.write_text('{"defnese": "t2t"}', encoding="utf-8")
    with pytest.raises(UnknownNameError, match="Did you mean 'defense'"):
        build_config(file=file)
    with pytest.raises(UnknownNameError, match="Valid data key names: attacker_train, attacker_valid, victim_test, victim_train"):
        build_config(sets=["data.victim_tset=3"])
    with pytest.raises(UsageError, match="expects key=value"):
        parse_set(["eta"])
    with pytest.raises(UsageError, match="seed='three' is not an integer"):
        build_config(sets=["seed=three"])


def test_bad_config_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("defense = ", encoding="utf-8")
    with pytest.raises(UsageError, match="not valid TOML"):
        build_config(file=bad)
    with pytest.raises(UsageError, match="does not exist"):
        build_config(file=tmp_path / "missing.toml")


def test_coerce_types():
    assert coerce("inf", float, key="eta") == math.inf
    assert coerce("1e2", float, key="eta") == 100.0
    assert coerce("true", bool, key="x") is True
    assert coerce("none", int | None, key="x") is None
    assert coerce("NOUN, VERB", tuple[str, ...], key="pos") == ("NOUN", "VERB")
    with pytest.raises(UsageError, match="eta='abc' is not a number"):
        coerce("abc", float, key="eta")
    with pytest.raises(UsageError, match="is not an integer"):
        coerce(True, int, key="n")
    # An optional setting names what it expects, not "a valid Optional".
    with pytest.raises(UsageError, match=r"^precision='fp16' is not one of: fp32, bf16 \(or none, for the default\)$"):
        coerce("fp16", Literal["fp32", "bf16"] | None, key="precision")


@dataclass
class _Toy:
    name: ClassVar[str] = "toy"
    eta: float = 1.0
    layers: int = 2

    def __post_init__(self) -> None:
        if self.eta <= 0:
            raise ValueError(f"eta must be positive, got {self.eta}")


def test_make_plugin_checks_keys_and_values():
    reg: Registry[type] = Registry("defense")
    reg.add("toy", _Toy)
    built = make_plugin(reg, "toy", {"eta": "2.5", "layers": "4"})
    assert (built.eta, built.layers) == (2.5, 4)
    assert get_params(built) == {"eta": 2.5, "layers": 4}
    with pytest.raises(UnknownNameError, match="Valid parameter of defense 'toy' names: eta, layers"):
        make_plugin(reg, "toy", {"etta": 1})
    with pytest.raises(UsageError, match="defense 'toy': eta must be positive"):
        make_plugin(reg, "toy", {"eta": "-1"})


def test_profile_sizes_shrink_for_small_datasets():
    assert profile_split_sizes("smoke", 10_000, {}) == {"victim_train": 200, "victim_test": 100,
                                                        "attacker_train": 200, "attacker_valid": 100}
    shrunk = profile_split_sizes("cpu", 600, {})
    assert sum(shrunk.values()) <= 600 and shrunk["victim_train"] == 240
    assert profile_split_sizes("cpu", 600, {"victim_test": 50})["victim_test"] == 50


def _documented_set_pairs() -> list[str]:
    """The ``key=value`` examples of ``--set`` in the config module's docstring and the options table of
    ``docs/quick-start.md``."""
    import re
    from pathlib import Path

    import rapt_audit.pipeline.config as config_module

    block = config_module.__doc__.split("``--set`` keys::", 1)[1]
    pairs = re.findall(r"^\s+(.*?)\s{2,}", block, flags=re.M)
    found = [p for line in pairs for p in re.findall(r"[\w.]+=[\w.]+", line)]
    options = (Path(__file__).resolve().parents[1] / "docs" / "quick-start.md").read_text(encoding="utf-8")
    row = next(line for line in options.splitlines() if line.startswith("| `--set KEY=VALUE`"))
    found += [p for p in re.findall(r"`([\w.]+=[\w.]+)`", row) if "NAME" not in p]
    return found


def test_documented_set_examples_build_their_plugins():
    from rapt_audit.api.plugins import ATTACKS, DEFENSES, load

    load()
    pairs = _documented_set_pairs()
    assert "attacks.whitebox.topk=5" in pairs and "attacks.whitebox.topk=10" in pairs
    for pair in pairs:  # one at a time: the examples may set the same key to different values
        config = build_config(sets=["defense=t2t", pair])
        make_plugin(DEFENSES, config.defense, config.defense_args)
        for name, args in config.attack_args.items():
            make_plugin(ATTACKS, name, args)
    config = build_config(sets=["attacks.whitebox.topk=5"])
    assert make_plugin(ATTACKS, "whitebox", config.attack_args["whitebox"]).topk == 5


def test_declared_constraints_apply_in_make_plugin_and_in_python():
    from rapt_audit.api.errors import PrivacyParameterError
    from rapt_audit.api.plugins import ATTACKS, load
    from rapt_audit.attacks.whitebox import WhiteboxAttack
    from rapt_audit.defenses.dpnr import DpnrDefense
    from rapt_audit.defenses.t2t import T2TDefense

    load()
    with pytest.raises(UsageError, match=r"whitebox\.topk must be >= 2 \(top-1 is token_accuracy\), got 1"):
        make_plugin(ATTACKS, "whitebox", {"topk": "1"})
    with pytest.raises(UsageError, match="whitebox.topk must be >= 2"):
        WhiteboxAttack(topk=1)
    with pytest.raises(PrivacyParameterError, match="eta must be finite and positive"):
        T2TDefense(eta=0.0)
    with pytest.raises(UsageError, match="t2t.unit='char' is not one of: token, word"):
        T2TDefense(unit="char")  # type: ignore[arg-type]
    with pytest.raises(PrivacyParameterError, match=r"dpnr\.mu must lie in \[0, 1\)"):
        DpnrDefense(mu=1.0)
    built = DpnrDefense(epsilon=2, mu=0, lr=1)
    assert (built.epsilon, built.mu, built.lr) == (2.0, 0.0, 1.0)
    assert all(type(v) is float for v in (built.epsilon, built.mu, built.lr))  # as make_plugin stores them
    assert T2TDefense(replacement=None).replacement is None  # None passes for optional parameters

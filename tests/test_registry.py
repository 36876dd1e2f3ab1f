"""Registry, selection grammar and did-you-mean errors."""

from __future__ import annotations

import pytest

from rapt_audit.api.errors import UnknownNameError, UsageError
from rapt_audit.api.registry import Registry


@pytest.fixture
def registry() -> Registry[object]:
    reg: Registry[object] = Registry("attack")
    for name, tags, default in [("whitebox", ("inversion",), True), ("mlp_inversion", ("inversion",), True),
                                ("attribute", ("inference",), True), ("ner", ("inference", "slow"), False)]:
        reg.add(name, object(), tags=tags, default=default)
    return reg


def test_all_takes_default_plugins_only(registry):
    assert registry.select("all") == ["attribute", "mlp_inversion", "whitebox"]


def test_names_tags_and_removal(registry):
    assert registry.select("ner,whitebox") == ["ner", "whitebox"]
    assert registry.select("tag:inversion") == ["mlp_inversion", "whitebox"]
    assert registry.select("all,-whitebox") == ["attribute", "mlp_inversion"]
    assert registry.select("-tag:inversion") == ["attribute"]
    assert registry.select("tag:inference") == ["attribute", "ner"]


def test_unknown_name_suggests_closest(registry):
    with pytest.raises(UnknownNameError) as info:
        registry.select("whitebx")
    message = str(info.value)
    assert "unknown attack 'whitebx'" in message and "Did you mean 'whitebox'" in message
    assert "attribute, mlp_inversion, ner, whitebox" in message


def test_unknown_tag_and_empty_selection(registry):
    with pytest.raises(UsageError, match="no attack has tag 'gpu'; known tags: inference, inversion, slow"):
        registry.select("tag:gpu")
    with pytest.raises(UsageError, match="selects nothing"):
        registry.select("whitebox,-whitebox")
    with pytest.raises(UsageError, match="empty attack selection"):
        registry.select(" , ")


def test_duplicate_registration_is_refused(registry):
    with pytest.raises(UsageError, match="registered twice"):
        registry.add("whitebox", object())


def test_builtin_plugins_are_registered():
    from rapt_audit.api.plugins import ATTACKS, DEFENSES, load

    load()
    assert "identity" in DEFENSES and "random_guess" in ATTACKS
    assert DEFENSES.get("identity").name == "identity"


def test_entry_point_plugins_are_discovered(monkeypatch):
    """Third-party plugins arrive through the rapt_audit.defenses / rapt_audit.attacks groups."""
    from dataclasses import dataclass

    import rapt_audit.api.plugins as plugins

    @dataclass
    class ThirdPartyDefense:
        """A defense shipped by another package."""

        exposes = frozenset({"texts"})

        def fit(self, train, *, ctx):
            return self

        def utility(self, test, *, ctx):
            return {}

        def release(self, records, *, ctx):
            raise NotImplementedError

    class FakeEntryPoint:
        name, value = "third_party", "pkg.mod:ThirdPartyDefense"

        def load(self):
            return ThirdPartyDefense

    monkeypatch.setattr(plugins, "_loaded", False)
    monkeypatch.setattr(plugins, "entry_points",
                        lambda group: [FakeEntryPoint()] if group == "rapt_audit.defenses" else [])
    try:
        plugins.load()
        assert plugins.DEFENSES.get("third_party") is ThirdPartyDefense
    finally:
        plugins.DEFENSES.remove("third_party")


def test_broken_entry_point_names_the_plugin(monkeypatch):
    import rapt_audit.api.plugins as plugins

    class Broken:
        name, value = "broken", "pkg.mod:Missing"

        def load(self):
            raise ImportError("no module named pkg")

    monkeypatch.setattr(plugins, "_loaded", False)
    monkeypatch.setattr(plugins, "entry_points", lambda group: [Broken()] if group == "rapt_audit.attacks" else [])
    # A warning, not an error: a broken third-party plugin must not break the others (issue #30).
    with pytest.warns(plugins.PluginWarning, match="entry point 'broken' = 'pkg.mod:Missing' failed to load"):
        plugins.load()
    try:
        with pytest.raises(UsageError, match="attack 'broken' is installed but could not be loaded.*no module named"):
            plugins.ATTACKS.get("broken")
    finally:
        plugins.ATTACKS.remove("broken")


def test_metric_is_declared_once():
    from rapt_audit.scoring.metrics import METRICS, metric

    before = METRICS.get("accuracy")
    with pytest.raises(UsageError, match="metric 'accuracy' is registered twice"):
        metric("accuracy", "utility", True, "a second declaration")
    assert METRICS.get("accuracy") is before

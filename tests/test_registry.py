"""Registry, selection grammar and did-you-mean errors."""

from __future__ import annotations

import pytest

from rapt_audit.errors import UnknownNameError, UsageError
from rapt_audit.registry import Registry


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
    from rapt_audit.plugins import ATTACKS, DEFENSES, load

    load()
    assert "identity" in DEFENSES and "random_guess" in ATTACKS
    assert DEFENSES.get("identity").name == "identity"

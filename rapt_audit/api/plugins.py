"""Plugin discovery: the built-in defenses and attacks, then third-party entry points.

Third-party packages declare plugins in their ``pyproject.toml``::

    [project.entry-points."rapt_audit.defenses"]
    my_defense = "my_pkg.my_module:MyDefense"

The entry point's name becomes the registry name. Loading happens once per process.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from rapt_audit.api.errors import UsageError
from rapt_audit.api.registry import Registry

DEFENSES: Registry[type] = Registry("defense")
ATTACKS: Registry[type] = Registry("attack")

_GROUPS = {"rapt_audit.defenses": DEFENSES, "rapt_audit.attacks": ATTACKS}
_loaded = False


def load() -> None:
    """Import the built-in plugin packages and every installed entry point (idempotent)."""
    global _loaded
    if _loaded:
        return
    importlib.import_module("rapt_audit.defenses")
    importlib.import_module("rapt_audit.attacks")
    for group, registry in _GROUPS.items():
        for ep in entry_points(group=group):
            if ep.name in registry:
                continue
            try:
                registry.add(ep.name, ep.load())
            except Exception as exc:  # a broken third-party plugin must not break the others
                raise UsageError(f"plugin {ep.name!r} from entry point {ep.value!r} failed to load: {exc}") from exc
    _loaded = True


__all__ = ["ATTACKS", "DEFENSES", "load"]

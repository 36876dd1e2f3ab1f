"""``rapt-audit plugin new defense|attack NAME``: a plugin package that installs and passes ``plugin check``.

The package holds a ``pyproject.toml`` with the entry point, one module with the plugin class (a
text defense that masks words, or an attack that reads the released words at their positions:
working placeholders to replace), a test that runs the conformance battery on the installed plugin,
and a README. Everything the module imports comes from :mod:`rapt_audit.plugin`. Nothing is ever
overwritten: an existing folder is refused before a file is written.
"""

from __future__ import annotations

import importlib.util
import keyword
import re
from pathlib import Path
from string import Template

from rapt_audit.api.errors import UsageError
from rapt_audit.api.files import write_text_atomic
from rapt_audit.api.plugins import ATTACKS, DEFENSES, load

_NAME = re.compile(r"[a-z][a-z0-9_]*")

PYPROJECT = Template('''\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "$dist"
version = "0.1.0"
description = "$summary"
readme = "README.md"
requires-python = ">=3.10"
dependencies = ["rapt-audit", "numpy"]

# The entry point's name is the plugin's name: rapt-audit run --$option $name
[project.entry-points."rapt_audit.${kind}s"]
$name = "$name:$cls"

[tool.setuptools]
py-modules = ["$name"]
''')

DEFENSE = Template('''\
"""$summary."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Mapping, Sequence

import numpy as np

from rapt_audit.plugin import Range, ReplacementCount, RunContext, TextDefense


@dataclass
class $cls(TextDefense):
    """Replaces each word by [MASK] with probability ``p`` (a placeholder: put your mechanism in privatize).

    Attributes:
        p: The probability that a word is masked.
    """

    #: Parameter overrides per profile; ``smoke`` (tests, rapt-audit plugin check) should take seconds.
    profiles: ClassVar[Mapping[str, Mapping[str, Any]]] = {"smoke": {}}

    p: Annotated[float, Range(0, 1)] = 0.5

    def privatize(self, texts: Sequence[str], *, rng: np.random.Generator,
                  ctx: RunContext) -> tuple[list[str], ReplacementCount]:
        """Mask each word with probability p: every word goes through the mechanism, the masked ones change."""
        released, count = [], ReplacementCount()
        for text in texts:
            words = text.split()
            masked = rng.random(len(words)) < self.p
            released.append(" ".join("[MASK]" if m else w for w, m in zip(words, masked)))
            count.perturbed += len(words)
            count.replaced += int(masked.sum())
        return released, count
''')

ATTACK = Template('''\
"""$summary."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np

from rapt_audit.plugin import (AttackerData, AttackResult, BaseAttack, Record, Release, RunContext, Skip,
                               ThreatModel, bootstrap_mean, metric)

# Every number an attack reports is a declared metric: its kind, direction and range, once.
metric("${name}_success", "attack", False, "share of the original's words $name recovers (at their position)")

_WORD = re.compile(r"\\w+")


@dataclass
class $cls(BaseAttack):
    """Guesses each original word as the released word at the same position (a placeholder for your attack).

    Attributes:
        lowercase: Compare words case-insensitively.
    """

    requires: ClassVar[frozenset[str]] = frozenset({"texts"})
    # What the adversary uses, as data: results record it and the report groups attacks by it.
    threat_model: ClassVar[ThreatModel] = ThreatModel(knows=("release",))
    profiles: ClassVar[Mapping[str, Mapping[str, Any]]] = {"smoke": {}}

    lowercase: bool = True

    def fit(self, aux: AttackerData, defense: Any, *, ctx: RunContext) -> $cls:
        """Nothing to learn (delete this method to keep BaseAttack's, which does the same); an adaptive attack
        trains here on ``defense.release(aux.train, ctx=ctx)`` and declares ``adaptive=True`` above."""
        return self

    def attack(self, release: Release, truth: Sequence[Record], *, ctx: RunContext) -> AttackResult:
        """Score the guesses per record; empirical privacy is 1 - the share of words recovered."""
        hits, words = [], []
        for record, text in zip(truth, release.user_texts()):
            original, released = (record.text.lower(), text.lower()) if self.lowercase else (record.text, text)
            original_words, released_words = _WORD.findall(original), _WORD.findall(released)
            hits.append(sum(a == b for a, b in zip(original_words, released_words)))
            words.append(len(original_words))
        if sum(words) == 0:
            raise Skip("the victim records hold no words to recover")
        hit, weight = np.array(hits, dtype=float), np.array(words, dtype=float)
        rate = np.divide(hit, weight, out=np.zeros_like(hit), where=weight > 0)
        success = bootstrap_mean(rate, weights=weight, rng=ctx.rng("attack", self.name))
        return AttackResult(success.complement(), {"${name}_success": success})
''')

TEST = Template('''\
"""rapt-audit's conformance battery on $name as installed (pip install --no-deps -e . first)."""

from rapt_audit.plugin import check_plugin


def test_${name}_keeps_every_rule():
    report = check_plugin("$kind", "$name")
    assert report.passed and not report.skipped, report.format()
''')

README = Template('''\
# $dist

$summary, registered as `$name`.

```bash
# install it: this registers the entry point $name (--no-deps: rapt-audit and numpy are installed already)
pip install --no-deps -e .
# the conformance battery (exit 0 when every rule passes): run it in CI too
rapt-audit plugin check $name
# the same battery, as a test
pytest
# a small audit with it
rapt-audit run --$option $name $run_hint --profile smoke
```

Edit `$name.py`: every parameter is a dataclass field with its rule in the annotation, randomness comes
from `ctx.rng(...)`, and everything is imported from `rapt_audit.plugin`. The guide is rapt-audit's
`docs/$guide`.
''')


def _check_name(kind: str, name: str) -> None:
    """Refuse a name that cannot be a plugin's (with why)."""
    if kind not in ("defense", "attack"):
        raise UsageError(f"a plugin is a defense or an attack, not {kind!r}")
    if not _NAME.fullmatch(name) or keyword.iskeyword(name):
        raise UsageError(f"{name!r} cannot name a plugin: use lower-case letters, digits and underscores, starting "
                         "with a letter (it is the entry point's name and the module's)")
    load()
    registry = DEFENSES if kind == "defense" else ATTACKS
    if name in registry or name in registry.broken:
        origin = registry.entry(name).origin if name in registry else "installed, not loadable"
        raise UsageError(f"a {kind} named {name!r} is already installed ({origin or 'built in'}); pick another name")
    if importlib.util.find_spec(name) is not None:
        raise UsageError(f"a module named {name!r} is already importable here; the plugin's module would clash "
                         "with it: pick another name")


def new_plugin(kind: str, name: str, directory: str | Path = ".") -> Path:
    """Write the skeleton of a ``kind`` plugin ``name`` into ``directory/<name with dashes>``; return that folder.

    Raises:
        UsageError: for a bad or taken name, or when the folder exists (nothing is overwritten).
    """
    _check_name(kind, name)
    folder = Path(directory) / name.replace("_", "-")
    if folder.exists():
        raise UsageError(f"{folder} exists; rapt-audit plugin new never overwrites: choose another --dir or name")
    words = name.replace("_", " ")
    camel = "".join(part.capitalize() for part in name.split("_"))
    values = {
        "name": name, "kind": kind, "option": "defense" if kind == "defense" else "attacks",
        "cls": camel if camel.endswith(kind.capitalize()) else camel + kind.capitalize(),
        "guide": f"writing-{'a' if kind == 'defense' else 'an'}-{kind}.md",
        "dist": f"rapt-audit-{name.replace('_', '-')}",
        "summary": f"{words[:1].upper()}{words[1:]}, a rapt-audit {kind}",
        "run_hint": "--attacks whitebox" if kind == "defense" else "--defense t2t",
    }
    files = {"pyproject.toml": PYPROJECT, f"{name}.py": DEFENSE if kind == "defense" else ATTACK,
             f"tests/test_{name}.py": TEST, "README.md": README}
    for relative, template in files.items():
        write_text_atomic(folder / relative, template.substitute(values))
    return folder


__all__ = ["new_plugin"]

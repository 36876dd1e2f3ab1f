"""Command-line pieces shared by the commands that run one defense (privatize, audit, calibrate)."""

from __future__ import annotations

from rapt_audit.api.errors import UsageError


def defense_params(sets: list[str]) -> dict[str, str]:
    """``--set KEY=VALUE`` pairs as the defense's parameters (a ``defense.`` prefix is allowed).

    Raises:
        UsageError: for a pair without ``=`` or without a key.
    """
    params: dict[str, str] = {}
    for pair in sets:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set {pair!r} is not KEY=VALUE (for example --set eta=75)")
        params[key.strip().removeprefix("defense.")] = value.strip()
    return params

"""The attacks of one run, each bounded and each kept: the runner's loop over its attacks.

Every attack is fitted and scored inside its time limit (:mod:`~rapt_audit.pipeline.time_limits`); one
that raises, breaks its contract or runs past the limit is recorded as an
:class:`~rapt_audit.api.types.AttackFailure` naming it, and the others go on. A ``KeyboardInterrupt``
(Ctrl-C, or SIGTERM as the command line turns it into one) ends the loop: the attacks that finished are
returned with the others recorded as interrupted, so that the runner writes them
(:mod:`~rapt_audit.pipeline.stage_reuse` lets the same command reuse them and run only the missing ones).
An attack skipped (it cannot read the defense's release, or it declines with a reason) is named in the run's log
once, with why, as well as recorded.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from rapt_audit.api.types import AttackFailure, Outcome, Skip
from rapt_audit.pipeline.contracts import attack_failure, check_attack_result, unreadable_release
from rapt_audit.pipeline.time_limits import AttackTimedOut, attack_time_limit, timeout_message

Log = Callable[[str], None]


def interrupted_message(name: str) -> str:
    """What a result written on an interrupt records for attack ``name``, unfinished or not started."""
    return (f"attack {name!r} was interrupted (Ctrl-C or SIGTERM) before it finished; run the same command again "
            "to run it (the attacks that finished are reused)")


def run_attacks(attacks: Mapping[str, Any], *, run_one: Callable[[str, Any], Outcome], release_kinds: frozenset[str],
                defense: str, reused: Mapping[str, Outcome], say: Log,
                step: Callable[[], None]) -> tuple[dict[str, Outcome], KeyboardInterrupt | None]:
    """Every attack's outcome, in order, and the interrupt that ended the loop early (``None``: none did).

    Args:
        attacks: Name → built attack.
        run_one: Fits and scores one attack (name, attack), returning its outcome (:func:`bounded`).
        release_kinds: What the defense's release holds (an attack that reads none of it is skipped).
        defense: The defense's name, for a skip's reason.
        reused: Outcomes of attacks that finished in an earlier run of this cell on unchanged code
            (:func:`~rapt_audit.pipeline.stage_reuse.stored_stages`).
        say: Progress lines.
        step: Advances the progress bar by one attack.
    """
    outcomes: dict[str, Outcome] = {}
    for name, attack in attacks.items():
        step()
        if name in reused:
            say(f"attack {name}: reused, it finished in an earlier run of this cell on the same code")
            outcomes[name] = reused[name]
        elif (reason := unreadable_release(attack.requires, release_kinds, defense)) is not None:
            say(f"attack {name}: skipped, it {reason}")  # recorded in the result too; the log names it once
            outcomes[name] = Skip(reason)
        else:
            try:
                say(f"attack {name}")
                outcomes[name] = run_one(name, attack)
            except KeyboardInterrupt as stop:  # keep what finished; the rest is marked for the next run
                for rest in attacks:
                    if rest not in outcomes:
                        outcomes[rest] = reused.get(rest) or AttackFailure(interrupted_message(rest))
                return outcomes, stop
    return outcomes, None


def bounded(name: str, attack: Any, *, fit: Callable[[], Any], score: Callable[[], Any], limit: float | None,
            say: Log) -> Outcome:
    """One attack's ``fit()`` then ``score()`` (its ``attack``, checked) inside its time limit ``limit``; a skip,
    a failure or a stop at the limit as its outcome."""
    method = "fit"
    try:
        with attack_time_limit(limit, name):
            fit()
            method = "attack"
            return check_attack_result(name, score())
    except Skip as skip:
        say(f"attack {name}: skipped: {skip.reason}")
        return Skip(skip.reason)  # a fresh one: the raised one's traceback holds the attack's frames
    except AttackTimedOut:  # raised inside the attack, so nothing of it runs on to write into the result
        failure = AttackFailure(timeout_message(name, limit or 0.0))
    except Exception as exc:  # noqa: BLE001 - one failing attack must not cost the other attacks' work
        failure = attack_failure(name, method, exc, attack)
    say(f"attack {name} failed (recorded; the other attacks go on): {failure.message}")
    return failure


def again(stop: KeyboardInterrupt, detail: str) -> KeyboardInterrupt:
    """The interrupt ``stop`` again (SIGTERM stays SIGTERM for the exit status), saying ``detail``."""
    try:
        return type(stop)(detail)
    except TypeError:  # an interrupt class that takes no message: raised as it came
        return stop


__all__ = ["again", "bounded", "interrupted_message", "run_attacks"]

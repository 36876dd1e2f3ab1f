"""``rapt-audit audit``: an empirical lower bound on a defense's privacy loss, pair by pair.

For each audited pair of inputs x, x' the released mechanism runs as a black box, exactly as the
defense runs it, and :func:`rapt_audit.mechanisms.audit.audit_pair` bounds its privacy loss from
below; the bound is compared with the defense's claim ``η·d(x, x')``. The pairs stress the
mechanism: each probe word against its nearest vocabulary neighbour (where the claim is
strongest), against words at the 10 %, 50 % and 90 % distance quantiles, and a null control
(x = x', claim 0). ``alpha`` is divided among the pairs (Bonferroni), so the whole audit's
statement holds at confidence ``1 − alpha``.

What is run of a defense is its audit protocol (:mod:`rapt_audit.audit.protocols`), which its capabilities declare
(``Capabilities(audit=...)``) or, declaring none, the one its object supports: a word-level sanitizer's own
``release_words`` against the claim ``ε·d(x, x')`` with its own groups and metric (``audit_groups``,
``audit_distance``), a dχ text defense's own ``privatize`` at η on one-token words, a token-embedding defense's noisy
vector, a client's noisy upload (clipping is post-processing, so the claim is the same), or the Laplace step on
normalised vectors of the sentence-representation defenses, with the claim ``epsilon/sensitivity · ‖u − u'‖₁`` (the
trained projection and word dropout before it are not audited). The built-in dχ text defenses declare the engines
they run (the nearest-vocabulary token or whole word; a word against words of its own POS category). No defense is
listed here by name: a third party's is audited as the built-ins are, and says what is audited in its own words
(``audit_description``).

A defense that claims a support (``claims_support()``: every release of a word of a group is a word of
that group; PCT2T and RAPT for POS categories, CusText for its sets, SanText+ for its sensitive words) also
gets a support check: one release outside the group disproves the claim.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from rapt_audit.api.capabilities import LAPLACE_REPRESENTATION
from rapt_audit.api.errors import UsageError
from rapt_audit.api.params import get_params, make_plugin
from rapt_audit.api.plugins import DEFENSES, capabilities_of, load, load_builtins
from rapt_audit.api.version import __version__
from rapt_audit.audit.protocols import PROTOCOLS, Protocol, claims_support, description, protocol_of
from rapt_audit.encoder.models import model_fingerprint
from rapt_audit.encoder.vocab import embedding_space
from rapt_audit.mechanisms.audit import PairAudit, audit_pair, audit_support, dchi_log_ratio, minimum_samples
from rapt_audit.mechanisms.engines import token_engine
from rapt_audit.pipeline.context import RunContext, default_cache_dir
from rapt_audit.scoring.bounds import check_alpha

#: Probe words (whole regular tokens of common English; PCT2T uses those of its selected categories).
PROBES = ("good", "doctor", "london", "money", "she", "with", "run")


@dataclass
class AuditReport:
    """The audit of one defense: its setting, every pair, and the overall verdict."""

    defense: str
    params: Mapping[str, Any]
    scale: float
    alpha: float
    samples: int
    seed: int
    model_fingerprint: str
    pairs: list[PairAudit] = field(default_factory=list)
    seconds: float = 0.0
    parameter: str = "eta"  # the name of ``scale``: claim = scale · d(x, x'); "epsilon/sensitivity" for Laplace
    audits: str = ""  # what is audited of the defense (:func:`audited`)

    @property
    def verdict(self) -> str:
        """``VIOLATION`` if any pair violates its claim, else ``ok``."""
        return "VIOLATION" if any(p.verdict == "VIOLATION" for p in self.pairs) else "ok"

    def to_json(self) -> dict[str, Any]:
        """The report as a JSON-able document."""
        return {"tool": f"rapt-audit audit {__version__}", "defense": self.defense, "audits": self.audits,
                "params": dict(self.params), "claim_per_unit_distance": {self.parameter: self.scale}, "alpha": self.alpha,
                "samples_per_input": {"select": self.samples, "evaluate": self.samples}, "seed": self.seed,
                "model_fingerprint": self.model_fingerprint, "verdict": self.verdict,
                "pairs": [p.to_json() for p in self.pairs], "seconds": round(self.seconds, 2)}


def audited(*, plugins: bool = False) -> dict[str, str]:
    """Defense name → what the audit audits of it, for every registered defense with an audit protocol
    (:func:`~rapt_audit.audit.protocols.protocol_of`), in its own words (``audit_description``).

    Args:
        plugins: Also import installed third-party plugins (:func:`~rapt_audit.api.plugins.load`); without,
            only the built-ins are imported (``--help`` must not import, or warn about, a third-party module).
    """
    load() if plugins else load_builtins()
    found = {}
    for name in DEFENSES.names():
        cls = DEFENSES.get(name)
        protocol = protocol_of(name, cls)
        if protocol is not None:
            found[name] = description(cls, protocol)
    return found


def _check_defense(defense: str) -> tuple[str, Protocol]:
    """What the audit audits of ``defense``, and the protocol it audits it by.

    Raises:
        UsageError: for a defense the audit does not cover (the message lists those it does and says how a
            defense becomes auditable).
        PluginError: for a defense that declares a protocol it does not implement.
    """
    load()
    cls = DEFENSES.get(defense)  # an unknown name: UnknownNameError with the closest names
    protocol = protocol_of(defense, cls)
    if protocol is not None:
        return description(cls, protocol), protocol
    listed = (f"audited defenses: {', '.join(audited(plugins=True))}; a defense is audited by the protocol its "
              "capabilities declare (rapt_audit.plugin.Capabilities(audit=...)) or, declaring none, by the one it "
              "implements: a word-level mechanism's release_words, audit_groups and audit_distance (subclass "
              "rapt_audit.plugin.WordMechanismDefense), a dχ text defense's privatize(texts, *, eta, rng, ctx) "
              "(subclass rapt_audit.plugin.DchiTextDefense)")
    declared = capabilities_of(defense)
    why = (" (it is the no-privacy reference: it promises none)" if declared.reference else
           " (it sends nothing)" if declared.local_only else "")
    raise UsageError(f"defense {defense!r} has no stated guarantee to audit{why}; {listed}")


def _nearest(vectors: np.ndarray, row: int, rows: np.ndarray) -> int:
    """The row among ``rows`` (other than ``row`` itself) whose vector is nearest to row's."""
    own = np.linalg.norm(vectors[rows].astype(np.float64) - vectors[row].astype(np.float64), axis=1)
    own[rows == row] = np.inf
    return int(rows[int(np.argmin(own))])


def _pairs(vectors: np.ndarray, probes: list[tuple[int, np.ndarray]], tokens: tuple[str, ...],
           count: int) -> list[tuple[str, int, int]]:
    """(label, row of x, row of x') of the audited pairs, in a fixed order (see the module docstring).

    ``probes`` holds each probe word's row and the rows it may be paired with (the whole vocabulary,
    or for PCT2T its POS category).
    """
    def distances(row: int, rows: np.ndarray) -> np.ndarray:
        return np.linalg.norm(vectors[rows].astype(np.float64) - vectors[row].astype(np.float64), axis=1)

    nearest = []
    for row, rows in probes:
        other = _nearest(vectors, row, rows)
        nearest.append((f"nearest neighbour: {tokens[row]} / {tokens[other]}", row, other))
    first, rows = probes[0]
    order = rows[np.argsort(distances(first, rows), kind="stable")]
    quantiles = [(f"{int(q * 100)} % distance quantile: {tokens[first]} / {tokens[int(order[int(q * (len(order) - 1))])]}",
                  first, int(order[int(q * (len(order) - 1))])) for q in (0.1, 0.5, 0.9)]
    null = (f"null control: {tokens[first]} / {tokens[first]}", first, first)
    # The first probe's nearest neighbour, the null control, the quantiles, then the other probes.
    return [nearest[0], null, *quantiles, *nearest[1:]][:count]


def audit_defense(defense: str, params: Mapping[str, Any] | None = None, *, samples: int = 10_000, pairs: int = 6,
                  search: int = 8, alpha: float = 0.05, seed: int = 0, model: str = "minilm",
                  device: str = "cpu") -> AuditReport:
    """Audit ``defense`` at ``params`` on ``pairs`` pairs with ``samples`` releases per input and half.

    With ``search`` > 0 (word and token-vector releases), that many random words, each paired with
    its nearest neighbour, are screened on a tenth of the releases, and the pair whose lower bound
    comes closest to its claim is audited too, on fresh releases (so the search costs no confidence).

    Raises:
        UsageError: for a defense the audit does not cover (the message lists those it does), an
            ``eta`` of ``inf`` (no claim to audit), ``alpha`` outside (0, 1), fewer than one pair, or
            too few samples for any bound (the message says how many are needed).
        PluginError: for a defense that declares an audit protocol it does not implement.
    """
    audits, protocol = _check_defense(defense)
    alpha = check_alpha(alpha)
    if int(pairs) < 1 or int(search) < 0:
        raise UsageError(f"--pairs must be at least 1 and --search at least 0, got {pairs} and {search}")
    plugin = make_plugin(DEFENSES, defense, dict(params or {}))
    eta = protocol.scale(plugin)
    if math.isinf(eta):
        raise UsageError(f"{protocol.parameter}=inf claims no privacy, so there is nothing to audit; set a finite value")
    started = time.perf_counter()
    ctx = RunContext(seed=seed, profile="cpu", device=device, model=model, cache_dir=default_cache_dir())
    if protocol.sampler is None:  # the Laplace protocol: normalised vectors, not vocabulary rows
        return _audit_laplace(defense, plugin, ctx, eta, samples=int(samples), pairs=int(pairs), alpha=alpha,
                              seed=seed, model=model, started=started)
    engine = token_engine(ctx)
    space = engine.space
    # Pairs are drawn among words that are one token of their own: the defenses that privatize text
    # (PCT2T's word vectors, the embedding defenses' tokenizer) then release exactly the audited row.
    alone = np.array([ids == [int(i)] for ids, i in zip(engine.token_ids(list(space.tokens)), space.token_ids)])
    assert protocol.groups is not None
    candidates = protocol.groups(plugin, ctx, space)  # PCT2T's include words held as pieces (rows past the space's)
    groups = {g: rows[rows < alone.size][alone[rows[rows < alone.size]]] for g, rows in candidates.items()}
    probes = []
    for ids in engine.token_ids(list(PROBES)):
        row = int(space.rows_of(np.array(ids))[0]) if len(ids) == 1 else -1
        group = next((g for g, rows in groups.items() if row >= 0 and row in rows), None)
        if group is not None:
            probes.append((row, group))
    if not probes:  # no probe word lies in a group (SanText+'s sensitive words are the rarest): seeded rows of each
        pick = np.random.default_rng([seed, 1])
        probes = [(int(row), g) for g, rows in groups.items() if rows.size
                  for row in np.sort(pick.choice(rows, size=min(len(PROBES), rows.size), replace=False))]
    if not probes:
        raise UsageError(f"defense {defense!r}: no word that is one token of its own is in any group it claims a "
                         "guarantee for, so there is no pair to audit")
    sampler = protocol.sampler(plugin, engine, ctx)
    rng = np.random.default_rng(seed)
    report = AuditReport(defense, get_params(plugin), eta, float(alpha), int(samples), seed,
                         model_fingerprint(model, cache_dir=ctx.cache_dir),
                         parameter=protocol.claim_name(), audits=audits)
    group_of = dict(probes)
    metric = protocol.metric(plugin, ctx, space)
    chosen = [(label, row, other, group_of[row])
              for label, row, other in _pairs(space.vectors, [(row, groups[g]) for row, g in probes], space.tokens,
                                              int(pairs))]

    def audit(row: int, other: int, group: str, label: str, n: int, level: float) -> PairAudit:
        distance = metric(row, other)
        score = dchi_log_ratio(space.vectors[row], space.vectors[other]) if protocol.vectors else None
        return audit_pair(sampler(row, group), sampler(other, group), claim=eta * distance, n=n, alpha=level,
                          rng=rng, label=label, distance=distance, score=score)

    if search:  # screen random pairs on few releases; audit the most suspicious one on fresh releases
        screen = max(samples // 10, minimum_samples(alpha / 4))
        rows = np.concatenate(list(groups.values()))
        best, best_ratio = None, -1.0
        for row in rng.choice(rows, size=min(len(rows), int(search)), replace=False).tolist():
            group = next(g for g, members in groups.items() if row in members)
            other = _nearest(space.vectors, row, groups[group])
            screened = audit(row, other, group, "screen", screen, alpha)
            ratio = screened.lower_bound / max(screened.claim, 1e-12)
            if ratio > best_ratio:
                best, best_ratio = (row, other, group), ratio
        row, other, group = best
        chosen.append((f"found by a search over {search} pairs: {space.tokens[row]} / {space.tokens[other]}",
                       row, other, group))
    for label, row, other, group in chosen:
        report.pairs.append(audit(row, other, group, label, int(samples), alpha / len(chosen)))
    if claims_support(plugin):
        # The claimed support: PCT2T's word of the input's own category; CusText's word of the input's own set;
        # SanText+'s sensitive word for a sensitive input. One release outside it disproves the claim.
        for row, group in dict.fromkeys((row, group) for _, row, _, group in chosen):
            report.pairs.append(audit_support(sampler(row, group), candidates[group], n=int(samples), rng=rng,
                                              label=f"support: {space.tokens[row]} stays {protocol.within}{group}"))
    report.seconds = time.perf_counter() - started
    return report


def _audit_laplace(defense: str, plugin: Any, ctx: RunContext, scale: float, *, samples: int, pairs: int,
                   alpha: float, seed: int, model: str, started: float) -> AuditReport:
    """Pairs of normalised vectors through the defense's own Laplace step, two records per batch.

    The claim for rows u, u' is ``epsilon/sensitivity · ‖u − u'‖₁``. Each release is a batch of the
    audited row and a fixed second record b, so that three families of events are tried: the claimed
    (L1) likelihood ratio, the spread of ``w − u`` across coordinates (one scalar of noise per
    example, as in public DPNR code, makes it 0), and the distance of the two rows' difference to
    ``u − b`` (one noise vector shared by a batch, as in public CAPE code, makes it 0).
    """
    d = embedding_space(ctx).dim
    half, one = np.full(d, 0.5), np.eye(d)[0]
    cases = [("one coordinate at its extremes: 0 / 1", np.zeros(d), one),
             ("null control", half, half),
             ("one coordinate inside: 0.25 / 0.75", np.zeros(d) + 0.25 * one, 0.75 * one),
             ("every coordinate at its extremes: 0 / 1", np.zeros(d), np.ones(d))][:pairs]
    batch_mate = half
    drawn = [0]

    def sampler(u: np.ndarray) -> Callable[[int, np.random.Generator], np.ndarray]:
        def sample(n: int, _rng: np.random.Generator) -> np.ndarray:
            uids = [f"audit/{drawn[0] + i}/{part}" for i in range(n) for part in "ab"]
            drawn[0] += n
            rows = plugin.laplace_release(np.tile(np.stack([u, batch_mate]), (n, 1)), uids, ctx=ctx)
            return rows.reshape(n, 2 * d).astype(np.float64)
        return sample

    report = AuditReport(defense, get_params(plugin), scale, float(alpha), samples, seed,
                         model_fingerprint(model, cache_dir=ctx.cache_dir), parameter="epsilon/sensitivity",
                         audits=description(plugin, PROTOCOLS[LAPLACE_REPRESENTATION]))
    rng = np.random.default_rng(seed)
    for label, u, u_other in cases:
        distance = float(np.abs(u - u_other).sum())

        def likelihood(w: np.ndarray, u=u, u_other=u_other) -> np.ndarray:
            """claimed L1 log-likelihood ratio / (epsilon/sensitivity)"""
            return np.abs(w[:, :d] - u_other).sum(axis=1) - np.abs(w[:, :d] - u).sum(axis=1)

        def spread(w: np.ndarray, u=u) -> np.ndarray:
            """low spread of the noise across coordinates"""
            return -np.std(w[:, :d] - u, axis=1)

        def co_batched(w: np.ndarray, u=u) -> np.ndarray:
            """closeness of the batch's row difference to u - b"""
            return -np.linalg.norm(w[:, :d] - w[:, d:] - (u - batch_mate), axis=1)

        report.pairs.append(audit_pair(sampler(u), sampler(u_other), claim=scale * distance, n=samples,
                                       alpha=alpha / len(cases), rng=rng, label=label, distance=distance,
                                       score=[likelihood, spread, co_batched]))
    report.seconds = time.perf_counter() - started
    return report

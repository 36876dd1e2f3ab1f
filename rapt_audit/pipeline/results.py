"""The result file: schema, provenance and comparability signature (written atomically, :mod:`rapt_audit.api.files`).

``<out>/result.json`` holds one run::

    schema      "rapt-audit/result/1"
    signature   what makes two results comparable (data, splits, model, profile, attacks, version);
                results are compared, grouped and gated only when their signatures match
    cell_id     hash of the full configuration (the defense and its parameters included)
    config      the RunConfig
    dataset     name, task, synthetic flag, split sizes, notes
    defense     name and resolved parameters
    utility     metric -> {value, ci_low, ci_high, n, method, level}; accuracy also per_record: {num, den}
    attacks     attack -> {empirical_privacy: {..., per_record: {num, den}}, metrics: {...}, details: {...}}
                or {skipped: reason}, or {failed: message} for an attack that raised or broke its contract;
                ``worst_case`` (not an attack: :mod:`rapt_audit.scoring.worst_case`) the lowest content privacy
                over the inversion attacks that read the release, inside each bootstrap resample
    env         package versions (third-party plugins' distributions among them), git sha, model and
                data fingerprints, seed, device, wall time
    warnings    things a reader must know (synthetic data, departures from a paper)

``result.schema.json`` (next to this module) is the JSON Schema of that shape; :func:`read_result`
checks every file against it before reading a field (:mod:`rapt_audit.pipeline.result_schema`).
"""

from __future__ import annotations

import errno
import hashlib
import json
import platform
import subprocess
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from rapt_audit.api.errors import ResultError
from rapt_audit.api.files import write_json_atomic
from rapt_audit.api.parsing import DocumentError, FloatRangeError, read_document
from rapt_audit.api.plugins import plugin_distributions
from rapt_audit.api.types import AttackFailure, AttackResult, Estimate, Outcome, Skip
from rapt_audit.pipeline.result_schema import validate_result_document
from rapt_audit.pipeline.tidy import records_frame, tidy_records
from rapt_audit.scoring.worst_case import MEASURE as WORST_CASE_MEASURE

if TYPE_CHECKING:
    import pandas as pd

SCHEMA = "rapt-audit/result/1"
RESULT_FILE = "result.json"
SYNTHETIC_WARNING = ("SYNTHETIC DEMO DATA: these numbers come from the generated demo corpus, not from a real "
                     "dataset; they show that the pipeline works and say nothing about real-world privacy.")
_VERSIONED = ("rapt-audit", "numpy", "torch", "transformers", "peft", "scikit-learn", "spacy", "seqeval")


@dataclass
class RunResult:
    """One run's outcome, as written to and read from ``result.json``."""

    signature: str
    cell_id: str
    config: dict[str, Any]
    dataset: dict[str, Any]
    defense: dict[str, Any]
    utility: dict[str, Estimate]
    attacks: dict[str, Outcome]
    env: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    schema: str = SCHEMA

    def __post_init__(self) -> None:
        # A skip reason given as a plain string (the older in-memory shape) becomes a Skip.
        self.attacks = {name: outcome if isinstance(outcome, (AttackResult, Skip, AttackFailure))
                        else Skip.from_dict(outcome) for name, outcome in self.attacks.items()}

    @property
    def failed(self) -> dict[str, AttackFailure]:
        """The attacks that raised or broke their contract, with what went wrong."""
        return {name: o for name, o in self.attacks.items() if isinstance(o, AttackFailure)}

    @property
    def synthetic(self) -> bool:
        """Whether the run used the synthetic demo corpus."""
        return bool(self.dataset.get("synthetic"))

    def to_frame(self, *, path: str | Path | None = None) -> pd.DataFrame:
        """This result as a tidy ``pandas.DataFrame``: one row per measure (:mod:`~rapt_audit.pipeline.tidy`).

        Args:
            path: The file the result came from, for the ``path`` column.
        """
        return records_frame(tidy_records(self, path=None if path is None else str(path)))

    def to_dict(self) -> dict[str, Any]:
        """The JSON document."""
        attacks = {name: outcome_to_dict(outcome) for name, outcome in self.attacks.items()}
        utility = utility_to_dict(self.utility)
        return {"schema": self.schema, "signature": self.signature, "cell_id": self.cell_id,
                "config": self.config, "dataset": self.dataset, "defense": self.defense, "utility": utility,
                "attacks": attacks, "env": self.env, "warnings": list(self.warnings)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunResult:
        """Inverse of :meth:`to_dict`."""
        attacks = {name: outcome_from_dict(outcome) for name, outcome in data["attacks"].items()}
        return cls(signature=data["signature"], cell_id=data["cell_id"], config=dict(data["config"]),
                   dataset=dict(data["dataset"]), defense=dict(data["defense"]),
                   utility=utility_from_dict(data["utility"]),
                   attacks=attacks, env=dict(data["env"]), warnings=list(data.get("warnings", [])),
                   schema=data["schema"])


def outcome_to_dict(outcome: Outcome) -> Any:
    """One attack's outcome as ``result.json`` holds it (:func:`outcome_from_dict` reads it back)."""
    if isinstance(outcome, (Skip, AttackFailure)):
        return outcome.to_dict()
    # The headline keeps its per-record parts: the regression gate compares them paired.
    # So does the content privacy of an inversion attack: a benchmark's worst case over attacks is
    # recomputed from them inside each paired resample (rapt_audit.scoring.hierarchical).
    return {"empirical_privacy": outcome.empirical_privacy.to_dict(per_record=True),
            "metrics": {k: v.to_dict(per_record=k == WORST_CASE_MEASURE) for k, v in outcome.metrics.items()},
            "details": dict(outcome.details)}


def outcome_from_dict(doc: Any) -> Outcome:
    """Inverse of :func:`outcome_to_dict`."""
    if isinstance(doc, str) or "skipped" in doc:
        return Skip.from_dict(doc)
    if "failed" in doc:
        return AttackFailure.from_dict(doc)
    return AttackResult(Estimate.from_dict(doc["empirical_privacy"]),
                        {k: Estimate.from_dict(v) for k, v in doc["metrics"].items()}, doc.get("details", {}))


def utility_to_dict(utility: Mapping[str, Estimate]) -> dict[str, Any]:
    """A utility (metric → estimate) as ``result.json`` holds it (:func:`utility_from_dict` reads it back)."""
    # Accuracy keeps its per-record outcomes: every defense is scored on the same victim-test
    # records, so the claims compare utilities paired (rapt_audit.reporting.claims).
    return {k: v.to_dict(per_record=k == "accuracy") for k, v in utility.items()}


def utility_from_dict(doc: Mapping[str, Any]) -> dict[str, Estimate]:
    """Inverse of :func:`utility_to_dict`."""
    return {k: Estimate.from_dict(v) for k, v in doc.items()}


def write_result(result: RunResult, out_dir: str | Path) -> Path:
    """Write ``out_dir/result.json`` atomically and return its path."""
    path = Path(out_dir) / RESULT_FILE
    write_json_atomic(path, result.to_dict())
    return path


def why_unreadable(path: Path) -> str:
    """Why ``path``, which exists or is a link but is not a regular file, holds no result (for messages)."""
    try:
        path.stat()
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a loop of symbolic links"
        return "a symbolic link to nothing" if path.is_symlink() else (exc.strerror or str(exc))
    return "a folder" if path.is_dir() else "not a regular file"


def read_result(path: str | Path) -> RunResult:
    """Read a result file (or the result file in a run directory).

    Raises:
        ResultError: naming the file when it is missing, corrupt or of another schema, and the
            field when it does not follow the schema (:func:`validate_result_document`).
    """
    path = Path(path)
    if path.is_dir() and not path.name.endswith(".json"):  # a folder named result.json is refused, not entered
        path = path / RESULT_FILE
    if not path.exists():
        raise ResultError(f"no result file at {path}")
    try:
        data = read_document(path, source=str(path), fmt="json")[1]
    except DocumentError as exc:  # not JSON (at a line), not a regular file, nested too deep
        raise ResultError(f"result file {path} is corrupt: {exc.detail}" if exc.line else f"result file {exc}") from None
    except FloatRangeError as exc:  # a number too large for a float, at its line
        raise ResultError(f"result file {path} is corrupt: {exc}") from None
    if not isinstance(data, dict) or "schema" not in data:
        raise ResultError(f"{path} is not a rapt-audit result file (no 'schema' key)")
    if data["schema"] != SCHEMA:
        raise ResultError(f"result file {path} has schema {data['schema']!r}; this rapt-audit reads {SCHEMA!r}")
    validate_result_document(data, path)
    try:
        return RunResult.from_dict(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise ResultError(f"result file {path} is incomplete or malformed: {exc!r}") from None


def package_versions() -> dict[str, str]:
    """Installed versions of the packages that can change a result, the distributions of the
    third-party plugins loaded among them."""
    versions = {}
    for name in _VERSIONED:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = "not installed"
    return {**versions, **plugin_distributions()}


#: In a bundle's copy of rapt_audit (``rapt-audit bundle``): the commit it was packed from, as :func:`git_sha`
#: read it there, since the GPU machine's copy is no git checkout.
PACKED_FROM = "packed_from.txt"


def git_sha() -> str | None:
    """The commit of the source tree rapt_audit was imported from, when it is a git checkout, or that a
    bundle was packed from (:data:`PACKED_FROM`); None for an installed package."""
    root = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        out = None
    if out is None or out.returncode != 0:
        packed = root / PACKED_FROM
        return (packed.read_text(encoding="utf-8").strip() or None) if packed.is_file() else None
    dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, timeout=5).stdout.strip()
    return out.stdout.strip() + ("-dirty" if dirty else "")


def environment() -> dict[str, Any]:
    """Provenance common to every run (the runner adds seeds, fingerprints and timings)."""
    return {"versions": package_versions(), "python": platform.python_version(),
            "platform": platform.platform(), "git_sha": git_sha()}


def signature(*, dataset: str, data_fingerprint: str, split_sizes: Mapping[str, int], model: str,
              model_fingerprint: str, profile: str, attacks: Mapping[str, Any], package_version: str,
              attack_args: Mapping[str, Mapping[str, Any]] | None = None, code: str = "",
              plugins: Mapping[str, str] | None = None, service: str = "", service_fingerprint: str = "") -> str:
    """The comparability signature, sacrebleu style: one ``field:value`` per thing that changes a number.

    Two results may be compared (and share a leaderboard table) only when everything but the
    defense and the seed is the same: data and its fingerprint, split sizes, model weights,
    profile, the attacks and their settings, the code that ran, the versions of third-party attacks
    among them and the package's minor version. A third-party *defense* is not in it: its rows join
    the built-ins' (issue #42); its version is recorded with the row (``defense.origin``). The attacks read as their names, each followed by the settings
    the run gave it (``mlp_inversion(epochs=5)``; the others are its defaults at this profile and
    code), then ``@`` and a hash of every resolved setting, so that no difference hides behind a name.

    Args:
        attacks: Attack name → its resolved parameters (what the hash covers).
        attack_args: Attack name → the parameters the run set (what is written out).
        code: A digest of rapt-audit's code (:func:`rapt_audit.api.files.package_code_digest`).
        plugins: Distribution → version of the third-party attacks the run ran (written only when there is one).
        service, service_fingerprint: The service's model and its weights when it is not the client's ``model``
            (written after it as ``service:NAME@FP``; a run that names no service keeps its signature of before).
    """
    attack_hash = hashlib.sha256(json.dumps(attacks, sort_keys=True, default=str).encode("utf-8")).hexdigest()[:8]
    given = attack_args or {}
    names = ",".join(
        name + (f"({','.join(f'{k}={v}' for k, v in sorted(given[name].items()))})" if given.get(name) else "")
        for name in sorted(attacks))
    # Victim train/test, then attacker train/valid: the order docs/output.md documents.
    order = ("victim_train", "victim_test", "attacker_train", "attacker_valid")
    sizes = "/".join(str(split_sizes.get(k, 0)) for k in order)
    minor = ".".join(package_version.split(".")[:2])
    parts = [f"data:{dataset}@{data_fingerprint[:8]}", f"splits:{sizes}", f"model:{model}@{model_fingerprint[:8]}",
             *([f"service:{service}@{service_fingerprint[:8]}"] if service else []),
             f"profile:{profile}", f"attacks:{names}@{attack_hash}"]
    parts += [f"code:{code[:8]}"] if code else []
    parts += [f"plugins:{','.join(f'{d}={v}' for d, v in sorted(plugins.items()))}"] if plugins else []
    return "|".join([*parts, f"v:{minor}"])  # no spaces: the report shows it as one code token


def signature_fields(text: str) -> dict[str, str]:
    """A :func:`signature` read back: field → value (``{"data": "sst2@1a2b3c4d", ..., "code": "5e6f7a8b"}``)."""
    return dict(part.split(":", 1) for part in text.split("|") if ":" in part)

"""Who runs which model in a run: the service, the client and the attacker (ARCHITECTURE.md, "Roles").

* The **service** is customized and scored (utility, and identity's no-privacy ceiling): it runs
  ``RunConfig.service_model`` when the run names one, else the client's model
  (:meth:`RunContext.service <rapt_audit.pipeline.context.RunContext.service>`).
* The **client** runs ``RunConfig.model``: the word-level dχ mechanisms' embedding table, the local-only
  baselines, CAPE's and DPNR's encoder, SnD's denoiser.
* The **attacker** holds the client's public model and the mechanism; for a release in the service's
  input space (token vectors: ``embedding``, ``snd``) the service's public embedding table.

A defense whose release lives in the service's input space says so with the class attribute
``input_space = "service"`` (a capability, not a name the core knows): it, its release cache and the
attacks on its release then run in :meth:`~rapt_audit.pipeline.context.RunContext.as_service`, the run
seen from the service's model, as SnD's client holds the LLM's own embedding layer.
"""

from __future__ import annotations

from typing import Any

from rapt_audit.api.errors import ModelError
from rapt_audit.encoder.models import model_fingerprint, resolve_model_path
from rapt_audit.pipeline.config import RunConfig
from rapt_audit.pipeline.context import RunContext

#: The input spaces a defense may declare (``input_space``); ``client`` when it declares none.
INPUT_SPACES = ("client", "service")


def input_space(defense: Any) -> str:
    """``service`` for a defense that releases rows of the service's input table, else ``client``.

    Raises:
        ValueError: for a declared space that is neither.
    """
    space = getattr(type(defense), "input_space", "client")
    if space not in INPUT_SPACES:
        raise ValueError(f"defense {getattr(defense, 'name', defense)!r} declares input_space={space!r}; "
                         f"it must be one of {', '.join(INPUT_SPACES)}")
    return space


def defense_context(ctx: RunContext, defense: Any) -> RunContext:
    """The context ``defense`` and the attacks on its release run in: the service's view for a release in the
    service's input space (the same context when the service's model is the client's), else ``ctx``."""
    return ctx.as_service() if input_space(defense) == "service" else ctx


def check_model(spec: str | None, *, role: str) -> None:
    """Fail before any work when ``role``'s model (``client`` or ``service``; ``None``: none named) cannot be found
    here (an alias whose package or assembly is missing, a folder without ``config.json``); a Hugging Face id is
    checked when it loads.

    Raises:
        ModelError: naming the model, its role and the step that installs it.
    """
    if spec is None:
        return
    try:
        resolve_model_path(spec)
    except ModelError as exc:
        raise ModelError(f"the {role}'s model: {exc}") from None


def service_provenance(config: RunConfig, ctx: RunContext) -> dict[str, str]:
    """``env`` entries naming the service's model and its weights when it is not the client's (none otherwise,
    so the results of runs that name no service are written as before)."""
    if config.service_model is None:
        return {}
    return {"service_model": config.service_model,
            "service_model_fingerprint": model_fingerprint(config.service_model, cache_dir=ctx.cache_dir)}


__all__ = ["INPUT_SPACES", "check_model", "defense_context", "input_space", "service_provenance"]

"""The shorthands and the effective spec: the pair a resource means, with published settings filled in.

A resource may name only a speculator (its verifier comes from the draft's config or the catalog)
or only a verifier (the catalog recommends a speculator per engine).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from specdeploy import api
from specdeploy.modelinfo import ModelInfo, ModelResolver, catalog, info_from_config
from specdeploy.pairing.draft import draft_facts
from specdeploy.pairing.report import PairingReport
from specdeploy.pairing.rules import check_pair

DEFAULT_SPECULATIVE_TOKENS = 3


class PairingError(Exception):
    """The spec's pair cannot be completed (a shorthand with nothing to fill it from)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class ResolvedPair:
    """The pair a spec means, after the shorthands: ids, metadata, and ``notes`` saying how a model
    not named in the spec was chosen (or whose facts stood in for it); ``specdeploy plan`` shows them."""

    verifier_id: str
    speculator_id: str
    verifier: ModelInfo
    speculator: ModelInfo
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Lookup:
    """Fetches one model's metadata the way ``resolve_pair`` was asked to."""

    spec: api.SpeculativeDeploymentSpec
    resolver: ModelResolver
    overrides: Mapping[str, Mapping[str, Any]]
    token: str | None
    want_tokenizer: bool
    offline: bool

    def __call__(self, role: Literal["verifier", "speculator"], model_id: str) -> ModelInfo:
        section = self.spec.verifier if role == "verifier" else self.spec.speculator
        revision = section.revision if section else None
        given = self.overrides.get(role)
        if given is not None:
            return info_from_config(model_id, dict(given), revision=revision, source="configmap")
        access = self.spec.model_access
        return self.resolver.resolve(
            model_id,
            revision,
            token=self.token,
            endpoint=access.endpoint,
            offline=access.offline,
            want_tokenizer=self.want_tokenizer,
            network=not self.offline,
        )


def resolve_pair(
    spec: api.SpeculativeDeploymentSpec,
    resolver: ModelResolver,
    *,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    token: str | None = None,
    want_tokenizer: bool = False,
    offline: bool = False,
) -> ResolvedPair:
    """Fill in the shorthands and fetch both models' metadata.

    ``overrides`` maps "verifier" / "speculator" to a config.json given by the user (the
    ConfigMap path) and wins over any lookup. ``offline`` answers from local directories, the
    resolver's cache and the catalog only, never the network (the admission webhook's deadline).
    Raises PairingError (NoKnownSpeculator, VerifierNotDeclared) or ModelUnavailable."""
    lookup = _Lookup(spec, resolver, overrides or {}, token, want_tokenizer, offline)
    notes: list[str] = []
    speculator_id = _speculator_id(spec, notes)
    speculator = lookup("speculator", speculator_id)
    verifier_id = _verifier_id(spec, speculator_id, speculator, notes)
    verifier = lookup("verifier", verifier_id)
    notes += [model.note for model in (verifier, speculator) if model.note]
    return ResolvedPair(verifier_id, speculator_id, verifier, speculator, notes)


def _speculator_id(spec: api.SpeculativeDeploymentSpec, notes: list[str]) -> str:
    """The speculator the spec names, else the catalog's recommendation for its verifier."""
    if spec.speculator is not None and spec.speculator.model is not None:
        return spec.speculator.model
    if spec.verifier is None:
        raise PairingError("VerifierNotDeclared", "spec names neither a verifier nor a speculator model")
    engine, verifier_id = spec.engine.name, spec.verifier.model
    speculator_id = catalog.recommended_speculator(verifier_id, engine)
    if speculator_id is None:
        raise PairingError(
            "NoKnownSpeculator",
            f"no known EAGLE-3 speculator for verifier {verifier_id} on {engine}; set spec.speculator.model",
        )
    notes.append(f"speculator {speculator_id} is the catalog's recommendation for {verifier_id} on {engine}")
    return speculator_id


def _verifier_id(
    spec: api.SpeculativeDeploymentSpec, speculator_id: str, speculator: ModelInfo, notes: list[str]
) -> str:
    """The verifier the spec names, else the one the draft declares, else the catalog's."""
    if spec.verifier is not None:
        return spec.verifier.model
    declared = draft_facts(speculator.config).declared_verifier
    if declared is not None:
        notes.append(f"verifier {declared} is declared by speculator {speculator_id}")
        return declared
    known = catalog.trained_for(speculator_id)
    if known is None:
        raise PairingError(
            "VerifierNotDeclared",
            f"speculator {speculator_id} does not declare its verifier and the catalog "
            "does not know it; set spec.verifier.model",
        )
    notes.append(f"verifier {known} is the one the catalog says speculator {speculator_id} was trained for")
    return known


def effective_spec(
    spec: api.SpeculativeDeploymentSpec, resolved: ResolvedPair
) -> api.SpeculativeDeploymentSpec:
    """The spec with the pair and the speculator's published settings filled in (long form)."""
    engine = spec.engine.name
    settings = catalog.speculator_settings(resolved.speculator_id, engine)
    declared = draft_facts(resolved.speculator.config).speculative_tokens
    user_speculator = spec.speculator or api.Speculator()
    tokens = (
        user_speculator.num_speculative_tokens
        or settings.get("numSteps" if engine == "sglang" else "numSpeculativeTokens")
        or settings.get("numSpeculativeTokens")
        or declared
        or DEFAULT_SPECULATIVE_TOKENS
    )
    update: dict[str, Any] = {
        "verifier": api.Verifier(
            model=resolved.verifier_id, revision=spec.verifier.revision if spec.verifier else None
        ),
        "speculator": user_speculator.model_copy(
            update={"model": resolved.speculator_id, "num_speculative_tokens": tokens}
        ),
    }
    sglang = spec.engine.sglang or api.SglangOptions()
    untouched = sglang.num_steps is None and sglang.eagle_topk is None and sglang.num_draft_tokens is None
    if engine == "sglang" and untouched and {"eagleTopk", "numDraftTokens"} <= settings.keys():
        steps = tokens if user_speculator.num_speculative_tokens else settings.get("numSteps", tokens)
        topk = settings["eagleTopk"]
        draft_tokens = steps + 1 if topk == 1 else settings["numDraftTokens"]
        filled = sglang.model_copy(
            update={"num_steps": steps, "eagle_topk": topk, "num_draft_tokens": draft_tokens}
        )
        update["engine"] = spec.engine.model_copy(update={"sglang": filled})
        update["speculator"] = update["speculator"].model_copy(update={"num_speculative_tokens": steps})
    return spec.model_copy(update=update)


def check_resolved(spec: api.SpeculativeDeploymentSpec, resolved: ResolvedPair) -> PairingReport:
    """The check with the engine, method and opt-out the resource asks for."""
    return check_pair(
        resolved.verifier,
        resolved.speculator,
        engine=spec.engine.name,
        method=spec.speculator.method if spec.speculator else "eagle3",
        allow_verifier_mismatch=spec.pairing.allow_verifier_mismatch,
    )

"""The pairing check: an EAGLE-3 speculator must match its verifier before any GPU is spent.

A draft paired with the wrong verifier fails late (a weight-shape assertion on the GPU) or, worse,
serves with near-zero acceptance. Every rule here has a stable reason code and names both values,
so a user can act on the message. Also the shorthands (speculator only, verifier only) and the
effective spec with the catalog's recommended settings filled in.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from specdeploy import api, catalog
from specdeploy.metadata import MetadataResolver, ModelMetadata, metadata_from_config

CheckStatus = Literal["Passed", "Failed", "Warning", "Skipped"]
DraftFormat = Literal["speculators", "eagle3", "eagle", "unknown"]

CHAT_PROBE = "Explain speculative decoding in one sentence."
DEFAULT_SPECULATIVE_TOKENS = 3


class PairingError(Exception):
    """The spec's pair cannot be completed (a shorthand with nothing to fill it from)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class DraftFacts:
    """What a draft's config.json says, whichever of the two EAGLE-3 formats it uses."""

    format: DraftFormat
    method: str | None
    architecture: str | None
    hidden_size: int | None
    target_hidden_size: int | None
    vocab_size: int | None
    draft_vocab_size: int | None
    aux_layer_ids: list[int] | None
    declared_verifier: str | None
    declared_architectures: list[str]
    speculative_tokens: int | None

    @property
    def expected_hidden_size(self) -> int | None:
        return self.target_hidden_size or self.hidden_size


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text_field(config: Mapping[str, Any], name: str) -> Any:
    """A field of a (possibly multimodal) verifier config: top level, else text_config."""
    if config.get(name) is not None:
        return config[name]
    text = config.get("text_config")
    return text.get(name) if isinstance(text, Mapping) else None


def draft_facts(config: Mapping[str, Any]) -> DraftFacts:
    """Read a draft config in the speculators format or the original EAGLE-3 format."""
    architectures = [str(a) for a in config.get("architectures") or []]
    architecture = architectures[0] if architectures else None
    spec_type = config.get("speculators_model_type")
    if spec_type:
        layer = config.get("transformer_layer_config") or {}
        spec_cfg = config.get("speculators_config") or {}
        verifier = spec_cfg.get("verifier") or {}
        tokens: int | None = None
        methods = spec_cfg.get("proposal_methods") or []
        if methods and isinstance(methods[0], Mapping):
            tokens = _int(methods[0].get("speculative_tokens"))
        aux = config.get("eagle_aux_hidden_state_layer_ids")
        return DraftFacts(
            format="speculators",
            method=str(spec_type),
            architecture=architecture,
            hidden_size=_int(layer.get("hidden_size")) or _int(config.get("hidden_size")),
            target_hidden_size=_int(config.get("target_hidden_size")),
            vocab_size=_int(layer.get("vocab_size")) or _int(config.get("vocab_size")),
            draft_vocab_size=_int(config.get("draft_vocab_size")),
            aux_layer_ids=[int(i) for i in aux] if isinstance(aux, list) else None,
            declared_verifier=str(verifier["name_or_path"]) if verifier.get("name_or_path") else None,
            declared_architectures=[str(a) for a in verifier.get("architectures") or []],
            speculative_tokens=tokens,
        )
    lowered = [a.lower() for a in architectures]
    if any("eagle3" in a for a in lowered):
        fmt: DraftFormat = "eagle3"
    elif any("eagle" in a for a in lowered):
        fmt = "eagle"
    else:
        fmt = "unknown"
    eagle_cfg = config.get("eagle_config") or {}
    aux = eagle_cfg.get("eagle_aux_hidden_state_layer_ids", config.get("eagle_aux_hidden_state_layer_ids"))
    return DraftFacts(
        format=fmt,
        method=fmt if fmt != "unknown" else None,
        architecture=architecture,
        hidden_size=_int(config.get("hidden_size")),
        target_hidden_size=_int(config.get("target_hidden_size")),
        vocab_size=_int(config.get("vocab_size")),
        draft_vocab_size=_int(config.get("draft_vocab_size")),
        aux_layer_ids=[int(i) for i in aux] if isinstance(aux, list) else None,
        declared_verifier=None,
        declared_architectures=[],
        speculative_tokens=None,
    )


@dataclass(frozen=True)
class PairingReport:
    """Outcome of every rule; ``verified`` becomes the PairingVerified condition."""

    verifier_id: str
    speculator_id: str
    verified: api.ConditionStatus
    reason: str
    message: str
    checks: list[api.CheckResult]
    warnings: list[str] = field(default_factory=list)

    def check(self, name: str) -> api.CheckResult:
        return next(c for c in self.checks if c.name == name)

    def to_status(self) -> api.PairingStatus:
        return api.PairingStatus(verified=self.verified, reason=self.reason, checks=list(self.checks))


def _result(name: str, status: CheckStatus, reason: str, message: str) -> api.CheckResult:
    return api.CheckResult(name=name, status=status, reason=reason, message=message)


def _same_model(a: str, b: str) -> bool:
    """Hub ids compare case-insensitively; a local path matches an id by its last components."""
    left, right = a.strip().rstrip("/").lower(), b.strip().rstrip("/").lower()
    if left == right:
        return True
    if left.startswith(("/", ".", "~")) or right.startswith(("/", ".", "~")):
        return left.rsplit("/", 1)[-1] == right.rsplit("/", 1)[-1]
    return False


def _mismatch(name: str, allow: bool, message: str) -> api.CheckResult:
    if allow:
        return _result(
            name, "Warning", "VerifierMismatch", f"{message} (allowed by pairing.allowVerifierMismatch)"
        )
    return _result(name, "Failed", "VerifierMismatch", message)


def _check_declared(v: ModelMetadata, s: ModelMetadata, d: DraftFacts, allow: bool) -> api.CheckResult:
    name = "declaredVerifier"
    if d.declared_verifier is None:
        return _result(name, "Skipped", "NotDeclared", f"speculator {s.model_id} does not name its verifier")
    if not _same_model(d.declared_verifier, v.model_id):
        return _mismatch(
            name,
            allow,
            f"verifier: speculator {s.model_id} was trained for {d.declared_verifier}, "
            f"verifier is {v.model_id}",
        )
    verifier_archs = [str(a) for a in v.config.get("architectures") or []]
    if d.declared_architectures and verifier_archs and d.declared_architectures[0] != verifier_archs[0]:
        return _mismatch(
            name,
            allow,
            f"verifier architecture: speculator expects {d.declared_architectures[0]}, "
            f"verifier {v.model_id} is {verifier_archs[0]}",
        )
    return _result(name, "Passed", "Declared", f"speculator declares verifier {d.declared_verifier}")


def _check_catalog(v: ModelMetadata, s: ModelMetadata, d: DraftFacts, allow: bool) -> api.CheckResult:
    name = "catalogVerifier"
    if d.declared_verifier is not None:
        return _result(name, "Skipped", "Declared", "the checkpoint declares its verifier")
    known = catalog.trained_for(s.model_id) or s.extra.get("trained_for")
    if known is None:
        return _result(
            name,
            "Warning",
            "VerifierUnverified",
            f"verifier: speculator {s.model_id} does not declare its verifier and the catalog does not "
            f"know it; pairing with {v.model_id} is unverified",
        )
    if not _same_model(str(known), v.model_id):
        return _mismatch(
            name,
            allow,
            f"verifier: catalog says speculator {s.model_id} was trained for {known}, "
            f"verifier is {v.model_id}",
        )
    return _result(name, "Passed", "CatalogMatch", f"catalog: speculator trained for {known}")


def _check_hidden(v: ModelMetadata, d: DraftFacts) -> api.CheckResult:
    name = "hiddenSize"
    expected, actual = d.expected_hidden_size, _int(_text_field(v.config, "hidden_size"))
    if expected is None or actual is None:
        return _result(name, "Skipped", "MissingField", "hidden size not given by both configs")
    if expected != actual:
        return _result(
            name,
            "Failed",
            "HiddenSizeMismatch",
            f"hidden size: speculator expects {expected}, verifier {v.model_id} has {actual}",
        )
    return _result(name, "Passed", "Match", f"hidden size {actual}")


def _check_vocab(v: ModelMetadata, d: DraftFacts) -> api.CheckResult:
    name = "vocabulary"
    actual = _int(_text_field(v.config, "vocab_size"))
    if d.vocab_size is None or actual is None:
        return _result(name, "Skipped", "MissingField", "vocabulary size not given by both configs")
    problems: list[tuple[str, str]] = []
    if d.vocab_size != actual:
        problems.append(
            (
                "VocabSizeMismatch",
                f"vocabulary: speculator expects {d.vocab_size} tokens, verifier {v.model_id} has {actual}",
            )
        )
    if d.draft_vocab_size is not None and d.draft_vocab_size > actual:
        problems.append(
            (
                "DraftVocabTooLarge",
                f"draft vocabulary: speculator has {d.draft_vocab_size} tokens, more than verifier "
                f"{v.model_id}'s {actual}",
            )
        )
    if problems:
        return _result(name, "Failed", problems[0][0], "; ".join(m for _, m in problems))
    draft = f", draft vocabulary {d.draft_vocab_size}" if d.draft_vocab_size is not None else ""
    return _result(name, "Passed", "Match", f"vocabulary {actual}{draft}")


def _check_aux_layers(v: ModelMetadata, d: DraftFacts) -> api.CheckResult:
    name = "auxLayers"
    layers = _int(_text_field(v.config, "num_hidden_layers"))
    if layers is None:
        return _result(
            name, "Skipped", "MissingField", f"verifier {v.model_id} does not give num_hidden_layers"
        )
    if d.aux_layer_ids is None:
        default = (2, layers // 2, layers - 3)
        if min(default) < 0:
            return _result(
                name,
                "Failed",
                "AuxLayerOutOfRange",
                f"auxiliary layers: engine default {default}, verifier {v.model_id} has {layers} layers",
            )
        return _result(name, "Passed", "EngineDefault", f"engine default layers {default} of {layers}")
    outside = [i for i in d.aux_layer_ids if not 0 <= i < layers]
    if outside:
        return _result(
            name,
            "Failed",
            "AuxLayerOutOfRange",
            f"auxiliary layers: speculator reads layers {outside}, verifier {v.model_id} has {layers} "
            f"layers (0-{layers - 1})",
        )
    return _result(name, "Passed", "InRange", f"layers {d.aux_layer_ids} of {layers}")


def _check_method(s: ModelMetadata, d: DraftFacts, method: str) -> api.CheckResult:
    name = "method"
    if d.method != method:
        found = (
            f"an {d.method} checkpoint"
            if d.method
            else f"{d.architecture or 'unknown'} (not an EAGLE checkpoint)"
        )
        return _result(
            name,
            "Failed",
            "MethodFormatMismatch",
            f"method: {method} needs an EAGLE-3 draft, speculator {s.model_id} is {found}",
        )
    return _result(name, "Passed", "Match", f"{method} draft in {d.format} format")


def _check_engine(v: ModelMetadata, engine: str) -> api.CheckResult:
    name = "engineSupport"
    archs = [str(a) for a in v.config.get("architectures") or []]
    if not archs:
        return _result(
            name, "Skipped", "MissingField", f"verifier {v.model_id} does not give its architecture"
        )
    arch = archs[0]
    supported = catalog.engine_supports(engine, arch)
    if supported is False:
        known = ", ".join(catalog.supported_architectures(engine)) or "none known"
        return _result(
            name,
            "Failed",
            "EngineUnsupportedArchitecture",
            f"engine: {engine} does not support EAGLE-3 for verifier architecture {arch} "
            f"(supported: {known})",
        )
    if supported is None:
        return _result(
            name,
            "Warning",
            "EngineSupportUnconfirmed",
            f"engine: EAGLE-3 support of {engine} for {arch} is not confirmed",
        )
    return _result(name, "Passed", "Supported", f"{engine} supports EAGLE-3 for {arch}")


def _tokenizer_json(directory: Path) -> Any:
    path = directory / "tokenizer.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _check_tokenizer(v: ModelMetadata, s: ModelMetadata) -> api.CheckResult:
    name = "tokenizer"
    if v.tokenizer_dir is None:
        return _result(
            name, "Skipped", "TokenizerUnavailable", f"no tokenizer files for verifier {v.model_id}"
        )
    try:
        import jinja2  # noqa: F401  (transformers renders chat templates with it)
        from transformers import AutoTokenizer
    except ImportError:
        return _result(name, "Skipped", "TransformersUnavailable", "transformers and jinja2 are needed")
    try:
        verifier_tok = AutoTokenizer.from_pretrained(str(v.tokenizer_dir))
    except Exception as exc:  # transformers raises many types for unreadable tokenizers
        return _result(
            name, "Failed", "TokenizerMismatch", f"tokenizer: verifier {v.model_id}'s does not load: {exc}"
        )
    problems: list[tuple[str, str]] = []
    if s.tokenizer_dir is not None and _tokenizer_json(s.tokenizer_dir) != _tokenizer_json(v.tokenizer_dir):
        try:
            draft_vocab: dict[str, int] = AutoTokenizer.from_pretrained(str(s.tokenizer_dir)).get_vocab()
        except Exception as exc:  # as above
            draft_vocab, problems = (
                {},
                [("TokenizerMismatch", f"tokenizer: speculator's does not load: {exc}")],
            )
        verifier_vocab: dict[str, int] = verifier_tok.get_vocab()
        if draft_vocab and draft_vocab != verifier_vocab:
            differing = sum(1 for tok, idx in draft_vocab.items() if verifier_vocab.get(tok) != idx)
            problems.append(
                (
                    "TokenizerMismatch",
                    f"tokenizer: speculator's has {len(draft_vocab)} tokens ({differing} differ), "
                    f"verifier {v.model_id}'s has {len(verifier_vocab)}",
                )
            )
    problems += _chat_template_problems(v, verifier_tok)
    if problems:
        return _result(name, "Failed", problems[0][0], "; ".join(m for _, m in problems))
    shared = "identical tokenizers; " if s.tokenizer_dir is not None else ""
    return _result(name, "Passed", "Match", f"{shared}chat template renders")


def _expected_marker(v: ModelMetadata, vocab: Mapping[str, int]) -> str | None:
    marker = catalog.chat_marker(v.model_id)
    if marker:
        return marker
    if "<|im_start|>" in vocab:
        return "<|im_start|>user"
    if "<|start_header_id|>" in vocab:
        return "<|start_header_id|>user<|end_header_id|>"
    return None


def _chat_template_problems(v: ModelMetadata, tokenizer: Any) -> list[tuple[str, str]]:
    """Render one user turn the way seed 000's sanity check does and look for the chat markers."""
    if not getattr(tokenizer, "chat_template", None):
        return [("ChatTemplateBroken", f"chat template: verifier {v.model_id} has none")]
    try:
        rendered = tokenizer.apply_chat_template(
            [{"role": "user", "content": CHAT_PROBE}], tokenize=False, add_generation_prompt=True
        )
    except Exception as exc:  # jinja errors come in many types
        return [("ChatTemplateBroken", f"chat template: verifier {v.model_id}'s does not render: {exc}")]
    text = str(rendered)
    marker = _expected_marker(v, tokenizer.get_vocab())
    if CHAT_PROBE not in text:
        return [
            ("ChatTemplateBroken", f"chat template: rendered prompt lacks the user message: {text[:120]!r}")
        ]
    if marker is not None and marker not in text:
        return [
            (
                "ChatTemplateBroken",
                f"chat template: expected {marker!r} in the rendered prompt, "
                f"verifier {v.model_id} gives {text[:120]!r}",
            )
        ]
    if marker is None and text.strip() == CHAT_PROBE:
        return [("ChatTemplateBroken", f"chat template: verifier {v.model_id}'s adds no chat markers")]
    return []


def check_pair(
    verifier: ModelMetadata,
    speculator: ModelMetadata,
    *,
    engine: str,
    method: str = "eagle3",
    allow_verifier_mismatch: bool = False,
) -> PairingReport:
    """Run every pairing rule; the report lists all failures, not just the first."""
    d = draft_facts(speculator.config)
    checks = [
        _check_declared(verifier, speculator, d, allow_verifier_mismatch),
        _check_catalog(verifier, speculator, d, allow_verifier_mismatch),
        _check_hidden(verifier, d),
        _check_vocab(verifier, d),
        _check_aux_layers(verifier, d),
        _check_method(speculator, d, method),
        _check_engine(verifier, engine),
        _check_tokenizer(verifier, speculator),
    ]
    failed = [c for c in checks if c.status == "Failed"]
    warnings = [c.message for c in checks if c.status == "Warning"]
    pair = f"verifier {verifier.model_id} and speculator {speculator.model_id}"
    if failed:
        verified: api.ConditionStatus = "False"
        reason = failed[0].reason
        message = "; ".join(c.message for c in failed)
    elif any(c.reason == "VerifierUnverified" for c in checks):
        verified, reason = "Unknown", "Unverified"
        message = f"{pair}: no check failed, but the speculator's verifier is unknown"
    else:
        verified, reason = "True", "Compatible"
        message = f"{pair} are compatible"
    if warnings and not failed:
        message += " (warnings: " + "; ".join(warnings) + ")"
    return PairingReport(
        verifier_id=verifier.model_id,
        speculator_id=speculator.model_id,
        verified=verified,
        reason=reason,
        message=message,
        checks=checks,
        warnings=warnings,
    )


@dataclass(frozen=True)
class ResolvedPair:
    """The pair a spec means, after the shorthands: ids, metadata and how each was chosen."""

    verifier_id: str
    speculator_id: str
    verifier: ModelMetadata
    speculator: ModelMetadata
    verifier_from: Literal["spec", "speculator", "catalog"]
    speculator_from: Literal["spec", "catalog"]
    notes: list[str] = field(default_factory=list)


def resolve_pair(
    spec: api.SpeculativeDeploymentSpec,
    resolver: MetadataResolver,
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
    Raises PairingError (NoKnownSpeculator, VerifierNotDeclared) or MetadataUnavailable."""
    overrides = overrides or {}
    engine = spec.engine.name
    access = spec.model_access
    notes: list[str] = []

    def lookup(role: str, model_id: str, revision: str | None) -> ModelMetadata:
        given = overrides.get(role)
        if given is not None:
            return metadata_from_config(model_id, dict(given), revision=revision, source="configmap")
        return resolver.resolve(
            model_id,
            revision,
            token=token,
            endpoint=access.endpoint,
            offline=access.offline,
            want_tokenizer=want_tokenizer,
            network=not offline,
        )

    verifier_id = spec.verifier.model if spec.verifier else None
    speculator_id = spec.speculator.model if spec.speculator else None
    speculator_from: Literal["spec", "catalog"] = "spec"
    if speculator_id is None:
        if verifier_id is None:
            raise PairingError("VerifierNotDeclared", "spec names neither a verifier nor a speculator model")
        speculator_id = catalog.recommended_speculator(verifier_id, engine)
        if speculator_id is None:
            raise PairingError(
                "NoKnownSpeculator",
                f"no known EAGLE-3 speculator for verifier {verifier_id} on {engine}; "
                "set spec.speculator.model",
            )
        speculator_from = "catalog"
        notes.append(
            f"speculator {speculator_id} is the catalog's recommendation for {verifier_id} on {engine}"
        )
    speculator = lookup("speculator", speculator_id, spec.speculator.revision if spec.speculator else None)

    verifier_from: Literal["spec", "speculator", "catalog"] = "spec"
    if verifier_id is None:
        declared = draft_facts(speculator.config).declared_verifier
        if declared is not None:
            verifier_id, verifier_from = declared, "speculator"
            notes.append(f"verifier {declared} is declared by speculator {speculator_id}")
        else:
            known = catalog.trained_for(speculator_id)
            if known is None:
                raise PairingError(
                    "VerifierNotDeclared",
                    f"speculator {speculator_id} does not declare its verifier and the catalog "
                    "does not know it; "
                    "set spec.verifier.model",
                )
            verifier_id, verifier_from = known, "catalog"
            notes.append(
                f"verifier {known} is the one the catalog says speculator {speculator_id} was trained for"
            )
    verifier = lookup("verifier", verifier_id, spec.verifier.revision if spec.verifier else None)
    return ResolvedPair(
        verifier_id=verifier_id,
        speculator_id=speculator_id,
        verifier=verifier,
        speculator=speculator,
        verifier_from=verifier_from,
        speculator_from=speculator_from,
        notes=notes,
    )


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

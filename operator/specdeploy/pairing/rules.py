"""The pairing rules: an EAGLE-3 speculator must match its verifier before any GPU is spent.

A draft paired with the wrong verifier fails late (a weight-shape assertion on the GPU) or, worse,
serves with near-zero acceptance. Every rule here has a stable reason code and names both values,
so a user can act on the message.
"""

from __future__ import annotations

from specdeploy import api
from specdeploy.modelinfo import ModelInfo, catalog, model_key
from specdeploy.modelinfo.config import architectures, as_int, text_field
from specdeploy.pairing.draft import DraftFacts, draft_facts
from specdeploy.pairing.report import PairingReport, check_result
from specdeploy.pairing.tokenizer import check_tokenizer


def _same_model(a: str, b: str) -> bool:
    """Hub ids compare case-insensitively; a local path matches an id by its last components."""
    left, right = model_key(a), model_key(b)
    if left == right:
        return True
    if left.startswith(("/", ".", "~")) or right.startswith(("/", ".", "~")):
        return left.rsplit("/", 1)[-1] == right.rsplit("/", 1)[-1]
    return False


def _mismatch(name: str, allow: bool, message: str) -> api.CheckResult:
    if allow:
        return check_result(
            name, "Warning", "VerifierMismatch", f"{message} (allowed by pairing.allowVerifierMismatch)"
        )
    return check_result(name, "Failed", "VerifierMismatch", message)


def _check_declared(v: ModelInfo, s: ModelInfo, d: DraftFacts, allow: bool) -> api.CheckResult:
    name = "declaredVerifier"
    if d.declared_verifier is None:
        return check_result(
            name, "Skipped", "NotDeclared", f"speculator {s.model_id} does not name its verifier"
        )
    if not _same_model(d.declared_verifier, v.model_id):
        return _mismatch(
            name,
            allow,
            f"verifier: speculator {s.model_id} was trained for {d.declared_verifier}, "
            f"verifier is {v.model_id}",
        )
    verifier_archs = architectures(v.config)
    if d.declared_architectures and verifier_archs and d.declared_architectures[0] != verifier_archs[0]:
        return _mismatch(
            name,
            allow,
            f"verifier architecture: speculator expects {d.declared_architectures[0]}, "
            f"verifier {v.model_id} is {verifier_archs[0]}",
        )
    return check_result(name, "Passed", "Declared", f"speculator declares verifier {d.declared_verifier}")


def _check_catalog(v: ModelInfo, s: ModelInfo, d: DraftFacts, allow: bool) -> api.CheckResult:
    name = "catalogVerifier"
    if d.declared_verifier is not None:
        return check_result(name, "Skipped", "Declared", "the checkpoint declares its verifier")
    known = catalog.trained_for(s.model_id)
    if known is None:
        return check_result(
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
    return check_result(name, "Passed", "CatalogMatch", f"catalog: speculator trained for {known}")


def _check_hidden(v: ModelInfo, d: DraftFacts) -> api.CheckResult:
    name = "hiddenSize"
    expected, actual = d.expected_hidden_size, as_int(text_field(v.config, "hidden_size"))
    if expected is None or actual is None:
        return check_result(name, "Skipped", "MissingField", "hidden size not given by both configs")
    if expected != actual:
        return check_result(
            name,
            "Failed",
            "HiddenSizeMismatch",
            f"hidden size: speculator expects {expected}, verifier {v.model_id} has {actual}",
        )
    return check_result(name, "Passed", "Match", f"hidden size {actual}")


def _check_vocab(v: ModelInfo, d: DraftFacts) -> api.CheckResult:
    name = "vocabulary"
    actual = as_int(text_field(v.config, "vocab_size"))
    if d.vocab_size is None or actual is None:
        return check_result(name, "Skipped", "MissingField", "vocabulary size not given by both configs")
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
        return check_result(name, "Failed", problems[0][0], "; ".join(m for _, m in problems))
    draft = f", draft vocabulary {d.draft_vocab_size}" if d.draft_vocab_size is not None else ""
    return check_result(name, "Passed", "Match", f"vocabulary {actual}{draft}")


def _check_aux_layers(v: ModelInfo, d: DraftFacts) -> api.CheckResult:
    name = "auxLayers"
    layers = as_int(text_field(v.config, "num_hidden_layers"))
    if layers is None:
        return check_result(
            name, "Skipped", "MissingField", f"verifier {v.model_id} does not give num_hidden_layers"
        )
    if d.aux_layer_ids is None:
        default = (2, layers // 2, layers - 3)
        if min(default) < 0:
            return check_result(
                name,
                "Failed",
                "AuxLayerOutOfRange",
                f"auxiliary layers: engine default {default}, verifier {v.model_id} has {layers} layers",
            )
        return check_result(name, "Passed", "EngineDefault", f"engine default layers {default} of {layers}")
    outside = [i for i in d.aux_layer_ids if not 0 <= i < layers]
    if outside:
        return check_result(
            name,
            "Failed",
            "AuxLayerOutOfRange",
            f"auxiliary layers: speculator reads layers {outside}, verifier {v.model_id} has {layers} "
            f"layers (0-{layers - 1})",
        )
    return check_result(name, "Passed", "InRange", f"layers {d.aux_layer_ids} of {layers}")


def _check_method(s: ModelInfo, d: DraftFacts, method: str) -> api.CheckResult:
    name = "method"
    if d.method != method:
        found = (
            f"an {d.method} checkpoint"
            if d.method
            else f"{d.architecture or 'unknown'} (not an EAGLE checkpoint)"
        )
        return check_result(
            name,
            "Failed",
            "MethodFormatMismatch",
            f"method: {method} needs an EAGLE-3 draft, speculator {s.model_id} is {found}",
        )
    return check_result(name, "Passed", "Match", f"{method} draft in {d.format} format")


def _check_engine(v: ModelInfo, engine: str) -> api.CheckResult:
    name = "engineSupport"
    archs = architectures(v.config)
    if not archs:
        return check_result(
            name, "Skipped", "MissingField", f"verifier {v.model_id} does not give its architecture"
        )
    arch = archs[0]
    supported = catalog.engine_supports(engine, arch)
    if supported is False:
        known = ", ".join(catalog.supported_architectures(engine)) or "none known"
        return check_result(
            name,
            "Failed",
            "EngineUnsupportedArchitecture",
            f"engine: {engine} does not support EAGLE-3 for verifier architecture {arch} "
            f"(supported: {known})",
        )
    if supported is None:
        return check_result(
            name,
            "Warning",
            "EngineSupportUnconfirmed",
            f"engine: EAGLE-3 support of {engine} for {arch} is not confirmed",
        )
    return check_result(name, "Passed", "Supported", f"{engine} supports EAGLE-3 for {arch}")


def check_pair(
    verifier: ModelInfo,
    speculator: ModelInfo,
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
        check_tokenizer(verifier, speculator),
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

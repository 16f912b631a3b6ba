"""What the validating webhook rejects: only what can be decided fast and for certain.

Pairing failures decidable from the catalog or already-cached metadata, and engine rules the
CRD schema cannot express. Anything needing the network is admitted and left to the
reconcile, which reports it as a condition.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from specdeploy import api, engines, pairing
from specdeploy.modelinfo import ModelResolver, ModelUnavailable


def review(body: dict[str, Any], resolver: ModelResolver) -> str | None:
    """A rejection message naming the fields at fault, or None to admit."""
    try:
        api.check_name(body.get("metadata") or {})
    except ValueError as exc:
        return str(exc)
    try:
        spec = api.SpeculativeDeploymentSpec.model_validate(body.get("spec") or {})
    except ValidationError as exc:
        return api.validation_problems(exc)
    errors = engines.validate(spec)
    if errors:
        return "; ".join(map(str, errors))
    try:
        resolved = pairing.resolve_pair(spec, resolver, offline=True)
    except (ModelUnavailable, pairing.PairingError):
        return None
    report = pairing.check_resolved(spec, resolved)
    if report.verified == "False":
        return f"pairing check failed ({report.reason}): {report.message}"
    return None

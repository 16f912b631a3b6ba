"""Generate the CustomResourceDefinition from the API models.

pydantic emits JSON Schema (draft 2020-12); the apiserver wants a structural OpenAPI v3.0
schema. The conversion inlines references, turns optional unions into plain types, maps
exclusive bounds to the v3.0 form and keeps descriptions, defaults and CEL rules.
"""

from __future__ import annotations

from typing import Any

import yaml

from specdeploy.api import base, rules, spec, status

_DROP = {"title", "additionalProperties", "$defs"}


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in node:
        target = dict(defs[node["$ref"].rsplit("/", 1)[-1]])
        target.update({k: v for k, v in node.items() if k != "$ref"})
        return target
    if "allOf" in node and len(node["allOf"]) == 1:
        merged = _resolve(node["allOf"][0], defs)
        merged.update({k: v for k, v in node.items() if k != "allOf"})
        return merged
    return node


def _non_null(variants: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [v for v in variants if v.get("type") != "null"]


def _convert(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    node = _resolve(node, defs)
    out: dict[str, Any] = {}
    if "anyOf" in node:
        variants = _non_null(node["anyOf"])
        if node.get("x-kubernetes-int-or-string"):
            variants = []
        elif len(variants) == 1:
            inner = _convert(variants[0], defs)
            inner.update({k: v for k, v in node.items() if k not in ("anyOf", *_DROP) and k not in inner})
            if node.get("description"):
                inner["description"] = node["description"]
            if "default" in node and node["default"] is not None:
                inner["default"] = node["default"]
            else:
                inner.pop("default", None)
            return inner
        else:
            raise ValueError(f"cannot express union in a structural schema: {node}")
    for key, value in node.items():
        if key in _DROP or key == "anyOf":
            continue
        if key == "properties":
            out["properties"] = {name: _convert(sub, defs) for name, sub in value.items()}
        elif key == "items":
            out["items"] = _convert(value, defs)
        elif key == "const":
            out["enum"] = [value]
        elif key == "exclusiveMinimum":
            out["minimum"] = value
            out["exclusiveMinimum"] = True
        elif key == "exclusiveMaximum":
            out["maximum"] = value
            out["exclusiveMaximum"] = True
        elif key == "default" and value is None:
            continue
        else:
            out[key] = value
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    if out.get("type") == "object" and "properties" not in out:
        extra = node.get("additionalProperties")
        if isinstance(extra, dict) and extra:
            out["additionalProperties"] = _convert(extra, defs)
        else:
            out["x-kubernetes-preserve-unknown-fields"] = True
    if out.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
    return out


def openapi_schema(model: type[base.ApiModel]) -> dict[str, Any]:
    """Structural OpenAPI v3.0 schema of one model."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    return _convert(raw, raw.get("$defs", {}))


def _column(name: str, path: str, kind: str = "string", priority: int = 0) -> dict[str, Any]:
    column: dict[str, Any] = {"name": name, "type": kind, "jsonPath": path}
    if priority:
        column["priority"] = priority
    return column


def _printer_columns() -> list[dict[str, Any]]:
    """What ``kubectl get sdep`` shows (priority 1 only with ``-o wide``): by default what is
    served, how many replicas are ready and, as a pod's STATUS does, the Ready condition's reason
    (why it is not ready: NoNodeFits, PairingFailed, an engine failure); the long speculator id
    and the finer layout only with ``-o wide``, to keep the line within a terminal."""
    return [
        _column("Verifier", ".status.verifier"),
        _column("Speculator", ".status.speculator", priority=1),
        _column("Engine", ".spec.engine.name", priority=1),
        _column("TP", ".status.tensorParallelSize", "integer"),
        _column("Replicas", ".spec.replicas", "integer", priority=1),
        _column("Nodes", ".status.plan.nodesPerReplica", "integer", priority=1),
        _column("Ready", ".status.readyReplicas", "integer"),
        _column("Status", ".status.conditions[?(@.type=='Ready')].reason"),
        _column("Acceptance", ".status.acceptance.summary"),
        _column("Age", ".metadata.creationTimestamp", "date"),
    ]


def _object_fields() -> dict[str, Any]:
    """apiVersion and kind, described for ``kubectl explain`` as core types are, and metadata."""
    return {
        "apiVersion": {
            "type": "string",
            "description": f"The versioned schema of this object: {base.API_VERSION}.",
        },
        "kind": {"type": "string", "description": f"The REST resource this object represents: {base.KIND}."},
        # The apiserver takes no more than the type here: kubectl explain shows ObjectMeta's own.
        "metadata": {"type": "object"},
    }


def custom_resource_definition() -> dict[str, Any]:
    """The whole CRD object, as checked in under crds/ and shipped in the chart."""
    spec_schema = openapi_schema(spec.SpeculativeDeploymentSpec)
    spec_schema["description"] = "Desired state: one verifier/speculator pair served by N replicas."
    # Defaulted, so the apiserver fills in the zero counts from the start: READY shows 0, not
    # blank, before the operator's first status write (or while no operator runs).
    status_schema = {**openapi_schema(status.SpeculativeDeploymentStatus), "default": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{base.PLURAL}.{base.GROUP}"},
        "spec": {
            "group": base.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": base.KIND,
                "listKind": f"{base.KIND}List",
                "plural": base.PLURAL,
                "singular": base.SINGULAR,
                "shortNames": list(base.SHORT_NAMES),
                "categories": ["all", "specdeploy"],
            },
            "versions": [
                {
                    "name": base.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                    "additionalPrinterColumns": _printer_columns(),
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": (
                                "A verifier model served with its EAGLE-3 speculator (draft) by vLLM "
                                "or SGLang, checked for compatibility and planned onto GPUs."
                            ),
                            "required": ["spec"],
                            "properties": {
                                **_object_fields(),
                                "spec": spec_schema,
                                "status": status_schema,
                            },
                            **rules.schema_extra(rules.OBJECT),
                        }
                    },
                }
            ],
        },
    }


def render_yaml() -> str:
    """The CRD as YAML, byte-for-byte what crds/ holds."""
    header = "# Generated from the models in operator/specdeploy/api/ by `specdeploy crd`. Do not edit.\n"
    return header + yaml.safe_dump(custom_resource_definition(), sort_keys=False, width=100)

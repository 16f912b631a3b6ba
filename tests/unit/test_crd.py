"""The CRD is generated from the API models; the checked-in copy must not drift."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from specdeploy import api
from specdeploy.api.crd import custom_resource_definition, render_yaml
from specdeploy.cli import main

CHECKED_IN = Path(__file__).resolve().parents[2] / "crds" / "specdeploy.io_speculativedeployments.yaml"


def _spec_schema() -> dict[str, Any]:
    version = custom_resource_definition()["spec"]["versions"][0]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return schema


def test_checked_in_crd_matches_the_models() -> None:
    assert CHECKED_IN.read_text() == render_yaml(), (
        "run `specdeploy crd --output-file crds/...` (make crd) and commit"
    )


def test_crd_command_prints_the_same_document(capsys: Any) -> None:
    assert main(["crd"]) == 0
    assert capsys.readouterr().out == render_yaml()


def test_names_subresources_and_columns() -> None:
    crd = custom_resource_definition()
    names = crd["spec"]["names"]
    assert (names["kind"], names["plural"], names["shortNames"]) == (
        api.KIND,
        api.PLURAL,
        ["sdep", "specdeploy"],
    )
    version = crd["spec"]["versions"][0]
    assert version["subresources"]["scale"]["specReplicasPath"] == ".spec.replicas"
    assert version["subresources"]["scale"]["labelSelectorPath"] == ".status.selector"
    columns = version["additionalPrinterColumns"]
    default = [c["name"] for c in columns if not c.get("priority")]
    assert default == ["Verifier", "TP", "Ready", "Status", "Acceptance", "Age"]
    wide = [c["name"] for c in columns]
    assert wide == [
        "Verifier",
        "Speculator",
        "Engine",
        "TP",
        "Replicas",
        "Nodes",
        "Ready",
        "Status",
        "Acceptance",
        "Age",
    ]
    status = next(c for c in columns if c["name"] == "Status")
    assert status["jsonPath"] == ".status.conditions[?(@.type=='Ready')].reason"


def test_ready_replicas_is_always_in_a_written_status() -> None:
    """READY shows 0, not blank, for a resource with no replica ready: the schema defaults the
    status and its counts (so even before the operator's first write), and every status the
    operator writes carries them."""
    version = custom_resource_definition()["spec"]["versions"][0]
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert status["default"] == {}
    counts = status["properties"]
    assert counts["readyReplicas"]["default"] == 0 and counts["replicas"]["default"] == 0


def test_schema_is_structural() -> None:
    """No JSON-Schema-only constructs survive: the apiserver would reject them."""
    text = yaml.safe_dump(custom_resource_definition())
    for forbidden in ("$ref", "anyOf", "$defs", "title:", "const:", "type: 'null'"):
        assert forbidden not in text


def test_defaults_ranges_enums_and_cel_rules() -> None:
    spec = _spec_schema()
    props = spec["properties"]
    assert props["replicas"]["default"] == 1 and props["replicas"]["minimum"] == 0
    assert props["engine"]["properties"]["name"]["enum"] == ["vllm", "sglang"]
    assert props["engine"]["default"] == {}
    tokens = props["speculator"]["properties"]["numSpeculativeTokens"]
    assert (tokens["minimum"], tokens["maximum"]) == (1, 16)
    utilization = props["gpuMemoryUtilization"]
    assert (utilization["minimum"], utilization["maximum"]) == (0.01, 1)
    tensor = props["parallelism"]["properties"]["tensor"]
    assert tensor["x-kubernetes-int-or-string"] is True and "type" not in tensor
    assert tensor["default"] == "auto"
    assert any("has(self.verifier)" in rule["rule"] for rule in spec["x-kubernetes-validations"])
    engine_rules = props["engine"]["x-kubernetes-validations"]
    assert {r["fieldPath"] for r in engine_rules} == {".sglang", ".vllm"}
    assert props["scheduling"]["properties"]["affinity"]["x-kubernetes-preserve-unknown-fields"] is True


def test_every_field_has_a_description_for_kubectl_explain() -> None:
    """The whole schema, status and the object's own fields included: what ``kubectl explain``
    prints for a field is its description."""
    missing: list[str] = []

    def walk(node: dict[str, Any], path: str) -> None:
        for name, sub in node.get("properties", {}).items():
            field = f"{path}.{name}" if path else name
            # The apiserver refuses anything but the type on metadata, and explains ObjectMeta.
            if not sub.get("description") and field != "metadata":
                missing.append(field)
            walk(sub, field)
        if "items" in node:
            walk(node["items"], f"{path}[]")

    version = custom_resource_definition()["spec"]["versions"][0]
    walk(version["schema"]["openAPIV3Schema"], "")
    assert missing == []

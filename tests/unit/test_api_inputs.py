"""Inputs the API must take or refuse as Kubernetes would: quantities as int-or-string (``cpu: 8``),
and only resource names every child can take (the Service's DNS-1035 label and the revision label
of a multi-node replica's StatefulSets), refused on parse, by the webhook and by ``render``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from specdeploy import api
from specdeploy.api import rules
from specdeploy.api.base import LABEL_VALUE_MAX, MAX_REPLICAS
from specdeploy.api.crd import custom_resource_definition
from specdeploy.cli import main
from specdeploy.controller import admission
from specdeploy.exitcodes import ExitCode
from specdeploy.modelinfo import ModelResolver
from support.paths import SEED_EXAMPLE


@pytest.mark.parametrize(
    ("written", "parsed"),
    [(8, "8"), ("8", "8"), (0.5, "0.5"), (8.0, "8"), ("500m", "500m"), ("64Gi", "64Gi"), (1e-3, "0.001")],
)
def test_quantities_take_an_int_or_a_string_and_keep_one_form(written: Any, parsed: str) -> None:
    resources = api.Resources.model_validate({"requests": {"cpu": written}, "limits": {"memory": written}})
    assert resources.requests == {"cpu": parsed} and resources.limits == {"memory": parsed}
    cache = api.ModelCache.model_validate({"sizeLimit": written})
    assert cache.size_limit == parsed


@pytest.mark.parametrize("written", [True, "eight", "1.5.5", [8], {"cpu": 8}, 10**70])
def test_what_is_no_quantity_is_refused_naming_the_field(written: Any) -> None:
    with pytest.raises(ValidationError) as caught:
        api.SpeculativeDeploymentSpec.model_validate(
            {"verifier": {"model": "org/m"}, "resources": {"requests": {"cpu": written}}}
        )
    assert "spec.resources.requests.cpu" in api.validation_problems(caught.value)


def test_every_quantity_in_the_schema_is_int_or_string_with_the_apiservers_grammar() -> None:
    version = custom_resource_definition()["spec"]["versions"][0]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    nodes = [
        spec["properties"]["resources"]["properties"]["requests"]["additionalProperties"],
        spec["properties"]["resources"]["properties"]["limits"]["additionalProperties"],
        spec["properties"]["modelCache"]["properties"]["sizeLimit"],
    ]
    for node in nodes:
        assert node["x-kubernetes-int-or-string"] is True and "type" not in node
        assert node["pattern"] == api.base.QUANTITY_PATTERN


def _render(tmp_path: Path, capsys: pytest.CaptureFixture[str], **metadata: Any) -> tuple[int, str, str]:
    body = yaml.safe_load(SEED_EXAMPLE.read_text())
    body["metadata"].update(metadata)
    body["spec"]["resources"] = {"requests": {"cpu": 8}, "limits": {"cpu": 0.5}}
    path = tmp_path / "cr.yaml"
    path.write_text(yaml.safe_dump(body))
    code = main(["render", "-f", str(path)])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_an_integer_cpu_reaches_the_deployment_as_a_string(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _render(tmp_path, capsys)
    assert code == 0, err
    [deployment] = [d for d in yaml.safe_load_all(out) if d["kind"] == "Deployment"]
    engine = deployment["spec"]["template"]["spec"]["containers"][0]
    assert engine["resources"]["requests"]["cpu"] == "8"
    assert engine["resources"]["limits"]["cpu"] == "0.5"


LONGEST = "a" * api.NAME_MAX_LENGTH


def test_the_longest_name_fits_the_revision_label_of_the_last_groups_statefulset() -> None:
    """LeaderWorkerSet group i's workers are the StatefulSet <name>-<i>, whose pods carry
    controller-revision-hash: <statefulset>-<hash of up to 10 characters>."""
    label = f"{LONGEST}-{MAX_REPLICAS - 1}-{'9' * 10}"
    assert len(label) == LABEL_VALUE_MAX
    assert api.NAME_MAX_LENGTH == 47


@pytest.mark.parametrize("name", ["qwen3.5-8b", "Qwen3-8b", "8b-qwen", "qwen-", "qwen_3", LONGEST + "a"])
def test_a_name_the_children_cannot_take_is_refused_everywhere_with_the_rule(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = {"apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": {"name": name}}
    body["spec"] = yaml.safe_load(SEED_EXAMPLE.read_text())["spec"]
    assert admission.review(body, ModelResolver()) == rules.NAME.message
    with pytest.raises(ValidationError, match="DNS-1035"):
        api.SpeculativeDeployment.model_validate(body)
    code, out, err = _render(tmp_path, capsys, name=name)
    assert (code, out) == (ExitCode.BAD_INPUT, "")
    assert f"InvalidSpec: {rules.NAME.message}" in err


@pytest.mark.parametrize("name", ["qwen3-8b", "a", LONGEST])
def test_a_name_every_child_can_take_is_admitted(name: str) -> None:
    body = {"apiVersion": api.API_VERSION, "kind": api.KIND, "metadata": {"name": name}}
    body["spec"] = yaml.safe_load(SEED_EXAMPLE.read_text())["spec"]
    assert admission.review(body, ModelResolver()) is None
    api.SpeculativeDeployment.model_validate(body)

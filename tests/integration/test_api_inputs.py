"""Issue: day one on a real platform, the API's inputs and what ``kubectl get sdep`` says, on a
real apiserver with the operator running (see conftest).

A name the Service cannot take is refused at apply with the rule named, before anything starts;
a quantity written as an integer (``cpu: 8``) is taken as core/v1 takes it and reaches the
Deployment as a string; a resource that is not ready shows READY 0 and why in the default columns.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from sdeplib import apply, container
from specdeploy import api
from support.kube import Kubectl, WaitFor, condition, get
from support.paths import SEED_EXAMPLE

pytestmark = pytest.mark.usefixtures("operator")


def example(name: str, **spec_changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load(SEED_EXAMPLE.read_text())
    body["metadata"]["name"] = name
    body["spec"].update(spec_changes)
    return body


@pytest.mark.parametrize("name", ["qwen3.5-8b", "a" * (api.NAME_MAX_LENGTH + 1)], ids=["dot", "too-long"])
def test_a_name_the_children_cannot_take_is_refused_at_apply_naming_the_rule(
    kubectl: Kubectl, namespace: str, name: str
) -> None:
    proc = kubectl.run("apply", "-f", "-", input=json.dumps(example(name)), namespace=namespace)
    assert proc.returncode != 0, proc.stdout
    assert "metadata.name" in proc.stderr and "DNS-1035 label" in proc.stderr, proc.stderr
    assert f"at most {api.NAME_MAX_LENGTH} characters" in proc.stderr, proc.stderr
    assert get(kubectl, namespace, "sdep")["items"] == []


def test_the_longest_name_is_admitted(kubectl: Kubectl, namespace: str) -> None:
    apply(kubectl, namespace, example("a" * api.NAME_MAX_LENGTH))


def test_an_integer_cpu_is_taken_and_reaches_the_deployment_as_a_string(
    kubectl: Kubectl, namespace: str, wait_for: WaitFor
) -> None:
    resources = {"requests": {"cpu": 8}, "limits": {"cpu": "8.5"}}
    apply(kubectl, namespace, example("int-cpu", resources=resources))
    assert get(kubectl, namespace, "sdep", "int-cpu")["spec"]["resources"]["requests"]["cpu"] == 8
    deployment = wait_for(
        lambda: get(kubectl, namespace, "deployments")["items"], 60, "the Deployment of int-cpu"
    )[0]
    written = container(deployment)["resources"]
    assert written["requests"]["cpu"] == "8" and written["limits"]["cpu"] == "8500m"


def table(printed: str) -> list[dict[str, str]]:
    """``kubectl get``'s table as rows of column -> cell, cut at the header's column starts (a
    blank cell, like ACCEPTANCE before any traffic, leaves no word to split on)."""
    header, *rows = printed.splitlines()
    names = header.split()
    starts = [header.index(f" {name}") + 1 if i else 0 for i, name in enumerate(names)]
    ends = [*starts[1:], None]
    return [{n: row[s:e].strip() for n, s, e in zip(names, starts, ends, strict=True)} for row in rows]


def test_get_shows_ready_0_and_why_a_resource_is_not_ready(
    kubectl: Kubectl, namespace: str, wait_for: WaitFor
) -> None:
    body = example("b200-only", parallelism={"tensor": 1, "gpuProduct": "b200"})
    # The object as created, before any operator pass: the counts are there already.
    created = json.loads(
        kubectl("create", "-o", "json", "-f", "-", input=json.dumps(body), namespace=namespace)
    )
    assert created["status"]["readyReplicas"] == 0, created.get("status")
    wait_for(
        lambda: (
            condition(get(kubectl, namespace, "sdep", "b200-only"), "Ready").get("reason") == "NoNodeFits"
        ),
        30,
        "Ready=False NoNodeFits",
    )
    [row] = table(kubectl("get", "sdep", namespace=namespace))
    assert row["NAME"] == "b200-only"
    assert (row["READY"], row["STATUS"]) == ("0", "NoNodeFits"), row
    assert "SPECULATOR" not in row and "ACCEPTANCE" in row
    [wide] = table(kubectl("get", "sdep", "-o", "wide", namespace=namespace))
    assert wide["SPECULATOR"] == "RedHatAI/Qwen3-30B-A3B-Instruct-2507-speculator.eagle3"
    assert (wide["ENGINE"], wide["REPLICAS"], wide["READY"]) == ("vllm", "1", "0")
    assert wide["STATUS"] == "NoNodeFits"


def test_a_schedule_with_a_gap_is_refused_at_apply_naming_the_field(kubectl: Kubectl, namespace: str) -> None:
    body = example("gap")
    body["spec"]["speculator"]["schedule"] = [
        {"fromBatch": 1, "toBatch": 4, "tokens": 3},
        {"fromBatch": 8, "tokens": 0},
    ]
    proc = kubectl.run("apply", "-f", "-", input=json.dumps(body), namespace=namespace)
    assert proc.returncode != 0, proc.stdout
    assert "spec.speculator.schedule" in proc.stderr and "cover every batch size once" in proc.stderr
    assert get(kubectl, namespace, "sdep")["items"] == []


def test_a_schedule_reaches_the_engine_command(kubectl: Kubectl, namespace: str, wait_for: WaitFor) -> None:
    body = example("scheduled")
    body["spec"]["speculator"]["schedule"] = [
        {"fromBatch": 1, "toBatch": 4, "tokens": 2},
        {"fromBatch": 5, "tokens": 0},
    ]
    apply(kubectl, namespace, body)
    deployment = wait_for(
        lambda: get(kubectl, namespace, "deployments")["items"], 60, "the Deployment of scheduled"
    )[0]
    command = container(deployment)["command"]
    config = json.loads(command[command.index("--speculative-config") + 1])
    assert config["num_speculative_tokens_per_batch_size"] == [[1, 4, 2], [5, api.MAX_BATCH_SIZE, 0]]
    status = get(kubectl, namespace, "sdep", "scheduled")["status"]
    assert status["command"] == command

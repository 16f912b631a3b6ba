"""Issue: production clusters. checkov's Kubernetes policies over what a cluster gets from this
project: the chart with its default values (the operator) and the children the operator makes
for both seed examples (vLLM and SGLang engines), rendered by ``specdeploy render``. Each
finding is either fixed or explained in docs/engine-pods.md ("Policy scan"): the test fails on a
finding the table does not explain, and on a row that no longer matches a finding.

checkov is installed once into its own cached virtual environment (its dependencies would
clash with the test environment's pins), like the sandbox's engine and hub environments.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from specdeploy_sandbox import venvs
from support.paths import REPO

CHART = REPO / "charts" / "specdeploy"
DOC = REPO / "docs" / "engine-pods.md"
EXAMPLES = sorted((REPO / "manifests" / "examples").glob("qwen3-*.yaml"))
CHECKOV_VERSION = "3.3.30"
ENGINE_NAMESPACE = "models"
OPERATOR_NAMESPACE = "specdeploy-system"
ROW = re.compile(r"^\| `(CKV2?_K8S_\d+)` \| (engine|operator) \|", re.MULTILINE)


def _install(venv: Path, steps: venvs.Steps) -> None:
    steps.run(
        f"installing checkov {CHECKOV_VERSION}",
        [*venvs.pip_install(venv / "bin" / "python"), f"checkov=={CHECKOV_VERSION}"],
    )


@pytest.fixture(scope="session")
def checkov() -> Path:
    venv = venvs.ensure(f"checkov-{CHECKOV_VERSION}", f"checkov {CHECKOV_VERSION}", _install, sys.stderr, 900)
    return venv / "bin" / "checkov"


def _render(scanned: Path, helm_binary: str) -> Path:
    chart = subprocess.run(
        [helm_binary, "template", "specdeploy", str(CHART), "--namespace", OPERATOR_NAMESPACE,
         "--set", "image.repository=specdeploy"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    (scanned / "chart.yaml").write_text(chart.stdout)
    for example in EXAMPLES:
        engine = subprocess.run(
            [
                sys.executable, "-m", "specdeploy", "render", "-f", str(example), "-n", ENGINE_NAMESPACE,
                "--offline",
            ],
            capture_output=True, text=True, timeout=120, check=True,
        )  # fmt: skip
        (scanned / example.name).write_text(engine.stdout)
    return scanned


def _subject(resource: str) -> str:
    """engine or operator, from checkov's resource id (Kind.namespace.name...)."""
    namespace = resource.split(".")[1]
    return {ENGINE_NAMESPACE: "engine", OPERATOR_NAMESPACE: "operator"}.get(namespace, resource)


def findings(checkov: Path, scanned: Path) -> set[tuple[str, str]]:
    proc = subprocess.run(
        [str(checkov), "-d", str(scanned), "--framework", "kubernetes", "--output", "json", "--quiet"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr[-3000:]  # 1: some check failed
    report = json.loads(proc.stdout)
    reports = report if isinstance(report, list) else [report]
    return {
        (failed["check_id"], _subject(failed["resource"]))
        for one in reports
        for failed in one.get("results", {}).get("failed_checks", [])
    }


def documented() -> set[tuple[str, str]]:
    section = DOC.read_text().split("## Policy scan", 1)[1]
    return {(m.group(1), m.group(2)) for m in ROW.finditer(section)}


@pytest.fixture(scope="module")
def found(checkov: Path, helm_binary: str, tmp_path_factory: pytest.TempPathFactory) -> set[tuple[str, str]]:
    return findings(checkov, _render(tmp_path_factory.mktemp("policy-scan"), helm_binary))


def test_every_finding_is_explained(found: set[tuple[str, str]]) -> None:
    assert found, "checkov reported nothing: the scan did not run over the manifests"
    explained = documented()
    assert found - explained == set(), f"findings docs/engine-pods.md does not explain: {found - explained}"
    assert explained - found == set(), f"explained in docs but no longer found: {explained - found}"


def test_the_engine_pod_passes_the_checks_it_was_fixed_for(found: set[tuple[str, str]]) -> None:
    """The engine pod's hardening, as checkov sees it: requests and memory limit, non-root with a
    high UID, no privilege escalation, capabilities dropped, seccomp, no token, probes."""
    fixed = {
        "CKV_K8S_10", "CKV_K8S_12", "CKV_K8S_13",  # CPU request, memory request and limit
        "CKV_K8S_20", "CKV_K8S_23", "CKV_K8S_28", "CKV_K8S_37",  # escalation, root, NET_RAW, caps
        "CKV_K8S_31", "CKV_K8S_38", "CKV_K8S_40",  # seccomp, token, high UID
        "CKV_K8S_8", "CKV_K8S_9",  # liveness and readiness probes
    }  # fmt: skip
    assert {check for check, subject in found if subject == "engine"} & fixed == set()

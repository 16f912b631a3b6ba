"""A real engine: the tiny EAGLE-3 pair served by vLLM (CPU build) on a sandbox engine node.

One sandbox for the module, with one engine node and no phantom nodes, its model hub serving the
tiny models by id, and the operator pointed at that hub. The tests run in file order, one engine
at a time (each uses about 4 GiB).
"""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from clusterlib import Kubectl, WaitFor, wait_crd_established
from specdeploy.cli.demo import chat
from specdeploy.sandbox import tiny_models
from specdeploy.sandbox.cluster import Sandbox
from specdeploy.sandbox.operator_process import LocalOperator, start_operator

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "manifests" / "examples" / "sandbox-tiny-eagle3.yaml"
CRD_FILE = REPO / "crds" / "specdeploy.io_speculativedeployments.yaml"
NODES = """
nodeGroups:
  - name: engine
    count: 1
    engine: true
    cpu: "2"
    memory: 16Gi
    gpu: {product: SANDBOX-CPU, count: 2, memoryMiB: 4096}
"""
ENGINE_READY_S = 600.0
GRACE_S = 60.0
NS = "engines"


@pytest.fixture(scope="module")
def engine_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    root = tmp_path_factory.mktemp("engine-sandbox")
    nodes_file = root / "nodes.yaml"
    nodes_file.write_text(NODES)
    sandbox = Sandbox(f"e2e-engine-{os.getpid()}", root)
    try:
        sandbox.up(nodes_file=nodes_file, owner_pid=os.getpid(), timeout=300)
        yield sandbox
    finally:
        sandbox.down()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def k(engine_sandbox: Sandbox, kubectl_binary: str) -> Kubectl:
    return Kubectl(kubectl_binary, engine_sandbox.kubeconfig)


@pytest.fixture(scope="module")
def wait(k: Kubectl) -> WaitFor:
    return WaitFor(k, NS)


@pytest.fixture(scope="module")
def engine_operator(engine_sandbox: Sandbox, k: Kubectl) -> Iterator[LocalOperator]:
    k("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
    wait_crd_established(k, "speculativedeployments.specdeploy.io")
    k("create", "namespace", NS)
    workdir = engine_sandbox.dir / "operator-under-test"
    running = start_operator(
        engine_sandbox.kubeconfig,
        workdir / "operator.log",
        workdir / "tls",
        hub_endpoint=engine_sandbox.hub_endpoint(),
    )
    try:
        yield running
    finally:
        running.stop()
        print(f"\n--- operator log (tail) ---\n{running.log_tail()}")


def _resource(name: str, speculator: str) -> str:
    body = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"]["name"] = name
    body["spec"]["speculator"]["model"] = speculator
    return yaml.safe_dump(body)


def _get(k: Kubectl, *what: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(k("get", "-n", NS, *what, "-o", "json"))
    return result


def _pods(k: Kubectl, name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = _get(k, "pods", "-l", f"app.kubernetes.io/instance={name}")["items"]
    return items


def _condition(body: dict[str, Any], type_: str) -> dict[str, Any]:
    found = [c for c in (body.get("status") or {}).get("conditions") or [] if c["type"] == type_]
    return found[0] if found else {}


def _sdep_when(k: Kubectl, name: str, type_: str, status: str | None = None) -> dict[str, Any] | None:
    """The resource once its ``type_`` condition exists (with ``status``, when given)."""
    body = _get(k, "sdep", name)
    condition = _condition(body, type_)
    return body if condition and (status is None or condition["status"] == status) else None


def _pod_ready(pod: dict[str, Any]) -> bool:
    return _condition(pod, "Ready").get("status") == "True"


def _health(ip: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{ip}:8000/health", timeout=2) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.HTTPError):
        return False


def _engine_processes(agent_pid: int) -> list[psutil.Process]:
    """Every live process the engine node started (its pods' process trees)."""
    try:
        return psutil.Process(agent_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _agent_pid(sandbox: Sandbox) -> int:
    (agent,) = [c for c in sandbox.components() if c.name.startswith("engine-node/")]
    return agent.pid


def test_the_example_runs_real_vllm_with_speculative_decoding(
    engine_sandbox: Sandbox, engine_operator: LocalOperator, k: Kubectl, wait: WaitFor
) -> None:
    name = "tiny-qwen3-eagle3"
    k("apply", "-n", NS, "-f", str(EXAMPLE))
    pod = wait(lambda: next(iter(_pods(k, name)), None), 120, "the engine pod")
    ip = wait(lambda: _pods(k, name)[0]["status"].get("podIP"), 120, "the pod's IP")

    # Ready follows the engine's readiness probe: never Ready while /health does not answer.
    saw_unready_running = False
    deadline = time.monotonic() + ENGINE_READY_S
    while time.monotonic() < deadline:
        pod = _pods(k, name)[0]
        healthy = _health(ip)
        if _pod_ready(pod):
            assert _health(ip), "the pod is Ready but the engine does not answer /health"
            break
        saw_unready_running |= pod["status"].get("phase") == "Running" and not healthy
        time.sleep(1)
    else:
        pytest.fail(f"the engine pod was not Ready within {ENGINE_READY_S:.0f}s\n{wait.snapshot()}")
    assert saw_unready_running, "the pod was never seen Running-but-not-Ready while the engine loaded"
    body = wait(
        lambda: _sdep_when(k, name, "Ready", "True"),
        60,
        "the SpeculativeDeployment to be Ready",
    )

    # The engine node ran exactly the command the operator put in status.
    command = body["status"]["command"]
    container = pod["status"]["containerStatuses"][0]
    pid = int(container["containerID"].rsplit("/", 1)[-1])
    argv = psutil.Process(pid).cmdline()
    script = next(i for i, arg in enumerate(argv) if Path(arg).name == command[0])
    assert argv[script + 1 :] == command[1:]
    assert "--speculative-config" in command

    reply = chat(f"http://{ip}:8000", "sandbox/tiny-qwen3")
    assert reply, "the completion returned no text"
    with urllib.request.urlopen(f"http://{ip}:8000/metrics", timeout=10) as response:
        exposition = response.read().decode()
    counters = {
        sample.name: sample.value
        for family in text_string_to_metric_families(exposition)
        for sample in family.samples
        if sample.name.startswith("vllm:spec_decode_num_") and sample.name.endswith("_total")
    }
    assert counters["vllm:spec_decode_num_drafts_total"] > 0
    # Every proposal of the accept-all draft is accepted.
    accepted = counters["vllm:spec_decode_num_accepted_tokens_total"]
    assert accepted == counters["vllm:spec_decode_num_draft_tokens_total"]
    assert "Initializing a V1 LLM engine" in k("logs", "-n", NS, pod["metadata"]["name"])

    # Deleting the resource stops every engine process within the grace period.
    processes = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    started = time.monotonic()
    k("delete", "-n", NS, "sdep", name, "--wait=false")
    _, alive = psutil.wait_procs(processes, timeout=GRACE_S + 15)
    assert not alive, f"engine processes left after deletion: {alive}"
    wait(lambda: not _pods(k, name), 60, "the engine pod to be deleted")
    print(f"\nengine processes stopped {time.monotonic() - started:.1f}s after the delete")


def test_a_refused_pair_never_reaches_an_engine(
    engine_sandbox: Sandbox, engine_operator: LocalOperator, k: Kubectl, wait: WaitFor
) -> None:
    name = "refused"
    before = {p.pid for p in _engine_processes(_agent_pid(engine_sandbox))}
    applied = k.run("apply", "-n", NS, "-f", "-", input=_resource(name, tiny_models.MISMATCHED))
    if applied.returncode != 0:
        assert "hidden size" in applied.stderr, applied.stderr
    else:
        body = wait(
            lambda: _sdep_when(k, name, "PairingVerified"),
            120,
            "the pairing verdict",
        )
        verdict = _condition(body, "PairingVerified")
        assert (verdict["status"], verdict["reason"]) == ("False", "HiddenSizeMismatch"), verdict
        time.sleep(5)  # room for a wrong Deployment to show up
        assert not _get(k, "deployments")["items"]
        assert not _pods(k, name)
    assert {p.pid for p in _engine_processes(_agent_pid(engine_sandbox))} == before
    k.run("delete", "-n", NS, "sdep", name, "--ignore-not-found")


def test_an_engine_that_fails_to_load_shows_its_error_in_status(
    engine_sandbox: Sandbox, engine_operator: LocalOperator, k: Kubectl, wait: WaitFor
) -> None:
    name = "broken-draft"
    k("apply", "-n", NS, "-f", "-", input=_resource(name, tiny_models.BROKEN))
    body = wait(
        lambda: _sdep_when(k, name, "Degraded", "True"),
        ENGINE_READY_S,
        "the engine failure in status",
    )
    degraded = _condition(body, "Degraded")
    assert degraded["reason"] == "EngineCrashLoop", degraded
    assert "exited with code 1" in degraded["message"], degraded
    assert "Engine core initialization failed" in degraded["message"], degraded
    assert _condition(body, "Ready")["status"] == "False"
    events = _get(k, "events", "--field-selector", f"involvedObject.name={name}")["items"]
    assert any(e["reason"] == "EngineCrashLoop" and e["type"] == "Warning" for e in events), events
    k("delete", "-n", NS, "sdep", name)


def test_an_image_the_node_cannot_run_shows_as_a_pull_failure_in_status(
    engine_sandbox: Sandbox, engine_operator: LocalOperator, k: Kubectl, wait: WaitFor
) -> None:
    name = "unknown-image"
    body = yaml.safe_load(_resource(name, tiny_models.ACCEPT_ALL))
    body["spec"]["engine"]["image"] = "registry.example/unknown/vllm:v0"
    k("apply", "-n", NS, "-f", "-", input=yaml.safe_dump(body))
    body = wait(lambda: _sdep_when(k, name, "Degraded", "True"), 120, "the pull failure in status")
    degraded = _condition(body, "Degraded")
    assert degraded["reason"] == "EngineImagePullFailed", degraded
    assert "registry.example/unknown/vllm:v0" in degraded["message"], degraded
    k("delete", "-n", NS, "sdep", name)

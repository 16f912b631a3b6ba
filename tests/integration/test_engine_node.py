"""Engine nodes run their pods as real local processes: probes, restarts, logs, deletion, cleanup.

One sandbox of its own for the module, since its last tests delete a node and stop the whole
sandbox: two engine nodes (the node file's count overridden) and one KWOK node. Containers are
stdlib Python (image ``python:3.11``, the ``python`` runtime) that listen on their pod IP. Every
container's command carries MARKER, so the last tests can prove that no process of theirs
survives node deletion or ``sandbox down``.
"""

from __future__ import annotations

import json
import os
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from specdeploy_sandbox.cluster import ENGINE_NODE_PREFIX, Sandbox
from specdeploy_sandbox.nodes import core_v1_for
from support.kube import Kubectl, WaitFor

pytestmark = pytest.mark.cluster

NAMESPACE = "engine-test"
MARKER = f"engine-node-test-{os.getpid()}"
NODE_FILE = {
    "nodeGroups": [
        {"name": "engine", "count": 1, "engine": True, "cpu": "2", "memory": "16Gi",
         "gpu": {"product": "SANDBOX-CPU", "count": 2, "memoryMiB": 4096}},
        {"name": "cpu", "count": 1, "cpu": "4", "memory": "8Gi"},
    ]
}  # fmt: skip
# An HTTP server on the pod IP: /healthz answers 503 before READY_AFTER and after FAIL_AFTER
# seconds of uptime, 200 in between; any other path answers with the pod's name.
SERVER = """
import http.server, os, time
start = time.time()
ready_after = float(os.environ.get("READY_AFTER", "0"))
fail_after = float(os.environ.get("FAIL_AFTER", "1e9"))
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        age = time.time() - start
        healthy = ready_after <= age < fail_after
        code = 200 if healthy or self.path != "/healthz" else 503
        body = f"hello from {os.environ['POD_NAME']}".encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
print(f"serving on {os.environ['POD_IP']}:8080 started={start}", flush=True)
http.server.ThreadingHTTPServer((os.environ["POD_IP"], 8080), Handler).serve_forever()
"""
POD_ENV = [
    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
]


def pod(
    name: str,
    script: str,
    *,
    node: str = "engine-0",
    env: list[dict[str, Any]] | None = None,
    grace: int = 30,
    policy: str = "Always",
    **container: Any,
) -> dict[str, Any]:
    """A pod bound to ``node`` running ``python -c script`` (with MARKER) as container ``main``."""
    main = {
        "name": "main",
        "image": "python:3.11",
        "command": ["python", "-u", "-c", f"{textwrap.dedent(script)}\n# {MARKER}"],
        "env": [*POD_ENV, *(env or [])],
        "ports": [{"name": "http", "containerPort": 8080}],
        **container,
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"nodeName": node, "restartPolicy": policy, "terminationGracePeriodSeconds": grace,
                 "containers": [main]},
    }  # fmt: skip


class Api:
    """Pod reads through the API client (fast enough to poll at 5 Hz), writes through kubectl."""

    def __init__(self, kubectl: Kubectl, kubeconfig: Path) -> None:
        self.kubectl = kubectl
        self.core = core_v1_for(kubeconfig)

    def apply(self, manifest: dict[str, Any]) -> None:
        self.kubectl("apply", "-f", "-", input=json.dumps(manifest))

    def get(self, name: str) -> dict[str, Any] | None:
        pods = json.loads(self.core.list_namespaced_pod(
            NAMESPACE, field_selector=f"metadata.name={name}", _preload_content=False
        ).data)["items"]  # fmt: skip
        return pods[0] if pods else None

    def container(self, name: str) -> dict[str, Any]:
        found = self.get(name)
        statuses = ((found or {}).get("status") or {}).get("containerStatuses") or [{}]
        return dict(statuses[0])


def ready(found: dict[str, Any] | None) -> bool:
    conditions = ((found or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def pid_of(status: dict[str, Any]) -> int:
    return int(status["containerID"].removeprefix("sandbox://"))


def gone(pid: int) -> bool:
    """No such process, or only a zombie waiting for init to reap it (an orphaned grandchild)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def marked_processes() -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter():
        try:
            if process.status() != psutil.STATUS_ZOMBIE and any(MARKER in part for part in process.cmdline()):
                found.append(process)
        except psutil.Error:
            continue
    return found


def poll(predicate: Any, timeout: float, what: str, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    root = tmp_path_factory.mktemp("engine-sandbox")
    nodes_file = root / "nodes.yaml"
    nodes_file.write_text(yaml.safe_dump(NODE_FILE))
    running = Sandbox(f"engine-{os.getpid()}", root)
    try:
        running.up(nodes_file=nodes_file, owner_pid=os.getpid(), engine_nodes=2, timeout=120)
        yield running
    finally:
        running.down()


@pytest.fixture(scope="module")
def kubectl(kubectl_binary: str, sandbox: Sandbox) -> Kubectl:
    run = Kubectl(kubectl_binary, sandbox.kubeconfig)
    run("create", "namespace", NAMESPACE)
    WaitFor(run, NAMESPACE)(
        lambda: run.run("get", "serviceaccount", "default", namespace=NAMESPACE).returncode == 0,
        timeout=30,
        describe="the default ServiceAccount",
    )
    return run


@pytest.fixture(scope="module")
def api(kubectl: Kubectl, sandbox: Sandbox) -> Api:
    return Api(kubectl, sandbox.kubeconfig)


def agent_process(sandbox: Sandbox, node: str) -> psutil.Process:
    [agent] = [c for c in sandbox.components() if c.name == ENGINE_NODE_PREFIX + node]
    assert agent.alive
    return psutil.Process(agent.pid)


def test_engine_nodes_are_ready_and_their_agents_idle_cheaply(sandbox: Sandbox, kubectl: Kubectl) -> None:
    nodes = json.loads(kubectl("get", "nodes", "-o", "json"))["items"]
    engines = {n["metadata"]["name"]: n for n in nodes if n["metadata"]["labels"].get(
        "sandbox.specdeploy.io/engine-node") == "true"}  # fmt: skip
    assert sorted(engines) == ["engine-0", "engine-1"]
    assert "kwok.x-k8s.io/node" not in engines["engine-0"]["metadata"]["annotations"]
    lease = json.loads(kubectl("get", "lease", "engine-0", "-n", "kube-node-lease", "-o", "json"))
    assert lease["spec"]["holderIdentity"] == "engine-0"

    agent = agent_process(sandbox, "engine-0")
    before = agent.cpu_times()
    time.sleep(5)
    after = agent.cpu_times()
    cpu = (after.user + after.system - before.user - before.system) / 5
    rss_mib = agent.memory_info().rss / 2**20
    print(f"\nagent idle: {cpu * 100:.2f}% CPU, {rss_mib:.0f} MiB RSS")
    assert cpu < 0.05
    assert rss_mib < 200


def test_pod_runs_serves_and_is_ready_only_after_its_probes_pass(api: Api, kubectl: Kubectl) -> None:
    probe = {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 1}
    created = time.time()
    api.apply(pod("web", SERVER, env=[{"name": "READY_AFTER", "value": "3"}],
                  startupProbe={**probe, "failureThreshold": 20}, readinessProbe=probe))  # fmt: skip

    running = poll(lambda: api.container("web").get("state", {}).get("running") and api.get("web"), 30,
                   "the container to run")  # fmt: skip
    status = running["status"]
    assert status["phase"] == "Running"
    assert not ready(running), "the startup probe has not passed yet"
    assert status["containerStatuses"][0]["started"] is False
    pod_ip = status["podIP"]
    assert pod_ip.startswith("127.") and status["hostIP"] == "127.0.0.1"

    ready_pod = poll(lambda: ready(api.get("web")) and api.get("web"), 30, "the pod to be Ready")
    became_ready = time.time()
    assert became_ready - created >= 3, "ready before the server answered 200"
    assert ready_pod["status"]["containerStatuses"][0]["started"] is True
    with urllib.request.urlopen(f"http://{pod_ip}:8080/", timeout=5) as response:
        assert response.read() == b"hello from web"

    logs = kubectl("logs", "web", namespace=NAMESPACE)
    assert f"serving on {pod_ip}:8080" in logs
    started = float(logs.split("started=")[1].split()[0])
    print(
        f"\npod created -> process started: {started - created:.2f}s; -> Ready: {became_ready - created:.1f}s"
    )
    assert started - created < 5


def test_a_failing_liveness_probe_restarts_the_container(api: Api) -> None:
    api.apply(pod("sick", SERVER, env=[{"name": "FAIL_AFTER", "value": "2"}], grace=2,
                  livenessProbe={"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 1,
                                 "failureThreshold": 2}))  # fmt: skip
    status = poll(lambda: api.container("sick").get("restartCount", 0) >= 1 and api.container("sick"), 40,
                  "a liveness restart")  # fmt: skip
    terminated = status["lastState"]["terminated"]
    assert terminated["exitCode"] == 143, "SIGTERM ends the run"
    assert terminated["reason"] == "Error"


def test_a_crashing_container_backs_off_with_its_logs_as_termination_message(
    api: Api, kubectl: Kubectl
) -> None:
    crash = """
        import sys
        print("loading the model")
        print("fatal: no such model", file=sys.stderr)
        sys.exit(3)
    """
    api.apply(pod("crash", crash, terminationMessagePolicy="FallbackToLogsOnError"))

    def backing_off() -> dict[str, Any] | None:
        status = api.container("crash")
        waiting = status.get("state", {}).get("waiting") or {}
        return status if waiting.get("reason") == "CrashLoopBackOff" else None

    status = poll(backing_off, 30, "CrashLoopBackOff")
    assert status["restartCount"] >= 1
    assert "back-off 10s restarting failed container=main pod=crash_" in status["state"]["waiting"]["message"]
    terminated = status["lastState"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (3, "Error")
    assert "fatal: no such model" in terminated["message"]
    assert "loading the model" in terminated["message"]
    assert "fatal: no such model" in kubectl("logs", "crash", "--previous", namespace=NAMESPACE)
    assert api.get("crash")["status"]["phase"] == "Running"  # type: ignore[index]


def test_images_without_a_runtime_fail_like_pulls(api: Api) -> None:
    manifest = pod("pull", "pass")
    sglang = {"name": "sglang", "image": "lmsysorg/sglang:v0.5.3", "command": ["python", "-m", "sglang"]}
    manifest["spec"]["containers"] = [{**manifest["spec"]["containers"][0], "image": "example.com/unknown:1"},
                                      sglang]  # fmt: skip
    api.apply(manifest)
    reasons: set[str] = set()

    def both_reasons_seen() -> bool:
        found = api.get("pull") or {}
        for status in (found.get("status") or {}).get("containerStatuses") or []:
            reasons.add((status["state"].get("waiting") or {}).get("reason", ""))
        return {"ErrImagePull", "ImagePullBackOff"} <= reasons

    poll(both_reasons_seen, 20, "ErrImagePull then ImagePullBackOff", interval=0.1)
    found = api.get("pull")
    assert found is not None
    assert found["status"]["phase"] == "Pending" and not ready(found)
    messages = {s["name"]: s["state"]["waiting"]["message"] for s in found["status"]["containerStatuses"]}
    assert '"example.com/unknown:1"' in messages["main"] and "sandbox-images.yaml" in messages["main"]
    assert '"sglang-cpu"' in messages["sglang"] and "sandbox-images.yaml" in messages["sglang"]


def test_a_missing_secret_blocks_the_container_until_it_exists(api: Api, kubectl: Kubectl) -> None:
    script = """
        import os, time
        print("token=" + os.environ["HF_TOKEN"], flush=True)
        time.sleep(600)
    """
    token = {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}}
    api.apply(pod("secret", script, env=[token]))

    def config_error() -> str:
        waiting = api.container("secret").get("state", {}).get("waiting") or {}
        return (
            str(waiting.get("message", "")) if waiting.get("reason") == "CreateContainerConfigError" else ""
        )

    assert poll(config_error, 20, "CreateContainerConfigError") == 'secret "hf-token" not found'
    assert api.get("secret")["status"]["phase"] == "Pending"  # type: ignore[index]

    kubectl("create", "secret", "generic", "hf-token", "--from-literal=token=abc123", namespace=NAMESPACE)
    poll(lambda: api.container("secret").get("state", {}).get("running"), 20, "the container to start")
    poll(lambda: "token=abc123" in kubectl("logs", "secret", namespace=NAMESPACE), 10, "the token in the log")


def test_kubectl_logs_tails_and_follows_to_the_end_of_the_run(api: Api, kubectl: Kubectl) -> None:
    script = """
        import time
        for n in range(4):
            print(f"line {n}", flush=True)
            time.sleep(0.5)
    """
    api.apply(pod("talk", script, policy="Never"))
    poll(lambda: api.container("talk").get("containerID"), 20, "the container to start")
    followed = kubectl.run("logs", "-f", "talk", namespace=NAMESPACE, timeout=30)
    assert followed.returncode == 0, followed.stderr
    assert followed.stdout.splitlines() == ["line 0", "line 1", "line 2", "line 3"]
    poll(lambda: (api.get("talk") or {}).get("status", {}).get("phase") == "Succeeded", 20, "Succeeded")
    assert kubectl("logs", "talk", "--tail=1", namespace=NAMESPACE) == "line 3\n"
    assert kubectl("logs", "talk", "--limit-bytes=6", namespace=NAMESPACE) == "line 0"


def test_deleting_pods_stops_their_processes_within_the_grace_period(api: Api, kubectl: Kubectl) -> None:
    stubborn = """
        import signal, subprocess, time
        signal.signal(signal.SIGTERM, lambda *_: print("ignoring SIGTERM", flush=True))
        child = subprocess.Popen(["sleep", "600"])
        print(f"child={child.pid}", flush=True)
        time.sleep(600)
    """
    api.apply(pod("polite", SERVER))
    api.apply(pod("stubborn", stubborn, grace=2))
    polite = poll(lambda: api.container("polite").get("state", {}).get("running") and api.container("polite"),
                  20, "polite to run")  # fmt: skip
    poll(lambda: "child=" in kubectl("logs", "stubborn", namespace=NAMESPACE), 20, "stubborn's child")
    stubborn_pid = pid_of(api.container("stubborn"))
    child_pid = int(kubectl("logs", "stubborn", namespace=NAMESPACE).split("child=")[1].split()[0])

    for name, pid, low, high in (("polite", pid_of(polite), 0.0, 3.0), ("stubborn", stubborn_pid, 2.0, 8.0)):
        started = time.monotonic()
        kubectl("delete", "pod", name, "--wait=false", namespace=NAMESPACE)
        poll(lambda name=name: api.get(name) is None, 30, f"{name} to be gone", interval=0.05)
        seconds = time.monotonic() - started
        print(f"\ndelete {name} -> pod gone: {seconds:.2f}s")
        assert low <= seconds <= high
        assert gone(pid)
    assert gone(child_pid), "the container's whole process group is killed"


def test_deleting_a_node_stops_its_pods(api: Api, kubectl: Kubectl, sandbox: Sandbox) -> None:
    api.apply(pod("doomed", SERVER, node="engine-1"))
    status = poll(lambda: api.container("doomed").get("state", {}).get("running") and api.container("doomed"),
                  20, "doomed to run")  # fmt: skip
    pid = pid_of(status)
    kubectl("delete", "node", "engine-1")
    poll(lambda: gone(pid), 20, "the pod's process to stop")
    assert agent_process(sandbox, "engine-1").is_running(), "the agent waits for its node to come back"


def test_sandbox_down_leaves_no_process(api: Api, sandbox: Sandbox) -> None:
    last = pod("last", SERVER)
    # A phantom-style container too: the image map gives pause an entrypoint.
    last["spec"]["containers"].append({"name": "pause", "image": "registry.k8s.io/pause:3.10"})
    api.apply(last)

    def all_running() -> list[int]:
        statuses = ((api.get("last") or {}).get("status") or {}).get("containerStatuses") or []
        running = [s for s in statuses if "running" in s["state"]]
        return [pid_of(s) for s in running] if len(running) == 2 else []

    pids = poll(all_running, 20, "both containers to run at shutdown")
    assert marked_processes(), "pods of the earlier tests are still running"
    agents = [agent_process(sandbox, node) for node in ("engine-0", "engine-1")]

    assert sandbox.down() == []

    assert not [a.pid for a in agents if a.is_running()]
    assert not marked_processes()
    assert all(gone(pid) for pid in pids)

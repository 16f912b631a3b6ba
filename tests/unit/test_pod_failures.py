"""Engine pod failures in the SpeculativeDeployment's status, without kopf or a cluster.

Pod bodies are shaped like the kubelet reports them (a vLLM crash with its log tail as the
termination message, an image pull back-off, a missing Secret, an OOM kill). The projection the
pod index keeps, the failure derived from it, the conditions and one reconcile pass through the
reconcile tests' fakes are checked here; tests/integration runs a crashing engine for real.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from specdeploy import api, pipeline
from specdeploy.controller import diffing, pods, status
from specdeploy.controller.pods import Failure, FailureMemory, PodView
from specdeploy.modelinfo import ModelResolver
from test_reconcile_pass import (
    KEY,
    NAME,
    NAMESPACE,
    Harness,
    _h100_inventory,
    _outcome_counts,
    applied,
    conditions_of,
    converge_seed,
    no_network,  # noqa: F401 (autouse here too: no test of this file may open a connection)
    reconciler_over_fakes,
    resource,
    rolled_out,
    stored,
    with_status,
)

POD = f"{NAME}-7d9f8b6c5-abc12"
IMAGE = "vllm/vllm-openai:v0.10.1.1"
VLLM_CRASH = """\
(EngineCore_0 pid=97) ERROR 09-12 10:14:03 [core.py:700] EngineCore failed to start.
  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 83, in __init__
    self.model_executor = executor_class(vllm_config)
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity \
of 79.19 GiB of which 1.02 GiB is free.
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""
LAST_LINE = "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"


def pod_body(
    *,
    name: str = POD,
    phase: str = "Running",
    ready: bool = False,
    state: dict[str, Any] | None = None,
    last_state: dict[str, Any] | None = None,
    restarts: int = 0,
    image: str = IMAGE,
    deleting: bool = False,
) -> dict[str, Any]:
    """An engine pod as the watch delivers it (labels from the Deployment template)."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": NAMESPACE,
        "uid": f"uid-{name}",
        "resourceVersion": "41",
        "labels": {
            "app.kubernetes.io/name": "specdeploy-server",
            "app.kubernetes.io/instance": NAME,
            "app.kubernetes.io/managed-by": "specdeploy",
            "pod-template-hash": "7d9f8b6c5",
        },
        "ownerReferences": [{"kind": "ReplicaSet", "name": f"{NAME}-7d9f8b6c5", "controller": True}],
    }
    if deleting:
        meta["deletionTimestamp"] = "2025-09-12T10:20:00Z"
    container: dict[str, Any] = {
        "name": "engine",
        "image": image,
        "imageID": "",
        "ready": ready,
        "started": ready,
        "restartCount": restarts,
        "state": state or {"running": {"startedAt": "2025-09-12T10:15:00Z"}},
        "lastState": last_state or {},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [{"name": "engine", "image": image}], "nodeName": "h100-0"},
        "status": {
            "phase": phase,
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "True" if ready else "False"},
            ],
            "containerStatuses": [container],
        },
    }


def terminated(exit_code: int, reason: str, message: str = "") -> dict[str, Any]:
    found: dict[str, Any] = {
        "exitCode": exit_code,
        "reason": reason,
        "startedAt": "2025-09-12T10:12:00Z",
        "finishedAt": "2025-09-12T10:14:04Z",
        "containerID": "containerd://0f3c",
    }
    if message:
        found["message"] = message
    return {"terminated": found}


def waiting(reason: str, message: str = "") -> dict[str, Any]:
    return {"waiting": {"reason": reason, "message": message} if message else {"reason": reason}}


def crash_loop(message: str = VLLM_CRASH, restarts: int = 3, **kw: Any) -> dict[str, Any]:
    backoff = f"back-off 40s restarting failed container=engine pod={POD}_{NAMESPACE}(uid-{POD})"
    return pod_body(
        state=waiting("CrashLoopBackOff", backoff),
        last_state=terminated(1, "Error", message),
        restarts=restarts,
        **kw,
    )


def failure_of(body: dict[str, Any]) -> Failure | None:
    return pods.pod_failure(pods.project(body))


# ---------------------------------------------------------------------------------------------
# The projection the pod index keeps
# ---------------------------------------------------------------------------------------------


def test_projection_keeps_only_what_status_needs() -> None:
    """Name, phase, flags and per container the restart count, waiting state and terminations."""
    view = pods.project(crash_loop())
    assert (view.name, view.phase, view.deleting, view.ready) == (POD, "Running", False, False)
    (engine,) = view.containers
    assert (engine.name, engine.image, engine.restart_count) == ("engine", IMAGE, 3)
    assert engine.waiting_reason == "CrashLoopBackOff"
    assert engine.waiting_message.startswith("back-off 40s restarting failed container=engine")
    assert engine.terminated is None
    assert engine.last_terminated == pods.Termination(1, "Error", VLLM_CRASH.strip(), "2025-09-12T10:14:04Z")


def test_projection_truncates_termination_messages_keeping_their_end() -> None:
    """A long log tail keeps its last characters: that is where the error is."""
    log = "".join(f"INFO loading shard {i}\n" for i in range(500)) + LAST_LINE
    (engine,) = pods.project(crash_loop(log)).containers
    assert engine.last_terminated is not None
    kept = engine.last_terminated.message
    assert len(kept) == pods.TERMINATION_TAIL
    assert kept.endswith(LAST_LINE) and kept.startswith(pods.ELLIPSIS)


def test_projection_keeps_where_and_what_the_engine_serves() -> None:
    """Where its /metrics answer, which command it runs (a digest) and since when it serves."""
    body = pod_body(ready=True)
    body["metadata"]["labels"]["specdeploy.io/engine"] = "vllm"
    body["spec"]["containers"][0].update(
        command=["vllm", "serve", "m"], ports=[{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    )
    body["status"]["podIP"] = "10.1.2.3"
    body["status"]["conditions"][1]["lastTransitionTime"] = "2025-09-12T10:16:30Z"
    view = pods.project(body)
    assert (view.engine, view.ip, view.port) == ("vllm", "10.1.2.3", 8000)
    assert view.command == pods.command_digest(["vllm", "serve", "m"]) != pods.command_digest(["vllm"])
    assert view.serving_since == datetime(2025, 9, 12, 10, 16, 30, tzinfo=UTC).timestamp()
    assert [p.name for p in pods.serving([view], ["vllm", "serve", "m"])] == [POD]
    assert pods.serving([view], ["vllm", "serve", "other"]) == []


def test_a_thinned_pod_projects_the_same(harness: Harness) -> None:
    """Pods arrive thinned to what the projection reads: of an engine pod's spec (the seed pair's
    Deployment template) only the engine's name, command and ports."""
    converge_seed(harness)
    template = harness.view.deployments[KEY]["spec"]["template"]
    for body in (crash_loop(), pod_body(ready=True)):
        body["spec"] = copy.deepcopy(template["spec"])
        body["metadata"]["labels"].update(template["metadata"]["labels"])
        body["status"].update(podIP="10.1.2.3", hostIP="10.0.0.7", qosClass="Guaranteed")
        before = pods.project(body)
        pods.thin(body)
        assert pods.project(body) == before and before.command and before.port
        assert len(json.dumps(body["spec"])) < len(json.dumps(template["spec"])) / 2
        (engine,) = body["spec"]["containers"]
        assert set(engine) == {"name", "command", "ports"}
        assert set(body["status"]) <= {"phase", "podIP", "conditions", "containerStatuses"}
        assert body["metadata"]["uid"] == f"uid-{POD}"  # kopf's identity of the object stays


def test_projection_of_a_pod_with_no_status_yet() -> None:
    """A pod just created (no status, no containers) projects to an empty, healthy view."""
    body = pod_body()
    del body["status"]
    view = pods.project(body)
    assert view == PodView(name=POD, phase="", deleting=False, ready=False, containers=())
    assert pods.pod_failure(view) is None


def test_terminating_and_ready_pods_report_nothing() -> None:
    """A pod being deleted or serving is not a failure, whatever its containers went through."""
    assert failure_of(crash_loop()) is not None
    assert pods.project(crash_loop(deleting=True)).deleting
    assert failure_of(crash_loop(deleting=True)) is None
    recovered = pod_body(ready=True, last_state=terminated(1, "Error", VLLM_CRASH), restarts=1)
    assert failure_of(recovered) is None
    assert failure_of(pod_body(phase="Failed", state=terminated(1, "Error", VLLM_CRASH))) is None


def test_starting_and_running_pods_report_nothing() -> None:
    """Creating containers, a clean first run and a clean exit are no failure."""
    assert failure_of(pod_body(phase="Pending", state=waiting("ContainerCreating"))) is None
    assert failure_of(pod_body()) is None  # running, not ready yet (the engine is loading)
    assert failure_of(pod_body(last_state=terminated(0, "Completed"), restarts=1)) is None


# ---------------------------------------------------------------------------------------------
# Which failure, and its message
# ---------------------------------------------------------------------------------------------


def test_crash_loop_reports_the_exit_and_the_engines_error() -> None:
    found = failure_of(crash_loop())
    assert found is not None and found.reason == pods.CRASH_LOOP
    head, tail = found.message.split(": ", 1)
    assert head == f"pod {POD} container engine exited with code 1 (Error) and was restarted"
    assert tail == VLLM_CRASH.strip()


def test_a_crash_before_the_first_restart_is_a_crash_too() -> None:
    """The window between the exit and the restart: the current state is the termination."""
    found = failure_of(pod_body(state=terminated(1, "Error", VLLM_CRASH)))
    assert found is not None and found.reason == pods.CRASH_LOOP
    assert found.message.startswith(f"pod {POD} container engine exited with code 1 (Error): ")


def test_a_restart_after_a_failed_liveness_probe_names_the_signal() -> None:
    """Killed by the kubelet (exit 137, not OOM) while running again, loading the model."""
    found = failure_of(pod_body(last_state=terminated(137, "Error"), restarts=2))
    assert found == Failure(
        pods.CRASH_LOOP,
        f"pod {POD} container engine exited with code 137 (Error, signal 9) and was restarted",
    )


def test_crash_loop_back_off_without_a_recorded_exit() -> None:
    found = failure_of(pod_body(state=waiting("CrashLoopBackOff", "back-off 5m0s"), restarts=9))
    assert found is not None and found.reason == pods.CRASH_LOOP
    assert "CrashLoopBackOff" in found.message and "5m0s" not in found.message


def test_out_of_memory_wins_over_the_crash_loop() -> None:
    body = pod_body(
        state=waiting("CrashLoopBackOff", "back-off 20s"),
        last_state=terminated(137, "OOMKilled", "Loading safetensors checkpoint shards: 60% Completed"),
        restarts=2,
    )
    found = failure_of(body)
    assert found == Failure(
        pods.OUT_OF_MEMORY,
        f"pod {POD} container engine was killed out of memory (OOMKilled, exit code 137) and was "
        "restarted: Loading safetensors checkpoint shards: 60% Completed",
    )


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        ("ImagePullBackOff", 'Back-off pulling image "vllm/vllm-openai:v9.9.9"'),
        (
            "ErrImagePull",
            'failed to pull and unpack image "docker.io/vllm/vllm-openai:v9.9.9": failed to resolve '
            'reference "docker.io/vllm/vllm-openai:v9.9.9": docker.io/vllm/vllm-openai:v9.9.9: not found',
        ),
        ("InvalidImageName", 'Failed to apply default image tag "vllm/VLLM:": invalid reference format'),
    ],
)
def test_image_pull_failures_name_the_image(reason: str, message: str) -> None:
    body = pod_body(phase="Pending", state=waiting(reason, message), image="vllm/vllm-openai:v9.9.9")
    assert failure_of(body) == Failure(
        pods.IMAGE_PULL_FAILED, f'pod {POD} cannot pull image "vllm/vllm-openai:v9.9.9" ({reason}): {message}'
    )


def test_a_missing_secret_is_a_config_error() -> None:
    missing = 'secret "hf-token" not found'
    body = pod_body(phase="Pending", state=waiting("CreateContainerConfigError", missing))
    assert failure_of(body) == Failure(
        pods.CONFIG_ERROR,
        f"pod {POD} container engine cannot be created (CreateContainerConfigError): {missing}",
    )


def test_other_waiting_reasons_are_start_failures() -> None:
    runtime = "failed to create containerd task: OCI runtime create failed"
    found = failure_of(pod_body(state=waiting("RunContainerError", runtime)))
    assert found == Failure(
        pods.START_FAILED, f"pod {POD} container engine cannot start (RunContainerError): {runtime}"
    )


def test_messages_stay_bounded_and_end_with_the_error() -> None:
    """However long the pod name and log, the message fits and its tail is the error."""
    log = "x" * 900 + "\n" + LAST_LINE
    found = failure_of(crash_loop(log, name="p" * 253))
    assert found is not None
    assert len(found.message) <= pods.MAX_MESSAGE
    assert found.message.endswith(LAST_LINE) and found.message.startswith(f"pod {'p' * 253} container engine")
    image_body = pod_body(state=waiting("ImagePullBackOff", "e" * 3000), image="r/" + "i" * 2000)
    image_failure = failure_of(image_body)
    assert image_failure is not None and len(image_failure.message) == pods.MAX_MESSAGE


def test_the_first_failing_pod_by_name_is_reported() -> None:
    """Stable across passes: the same pod is reported whatever order the index returns."""
    healthy = pods.project(pod_body(name=f"{NAME}-a", ready=True))
    pulling = pods.project(pod_body(name=f"{NAME}-c", state=waiting("ImagePullBackOff", "back-off")))
    crashing = pods.project(crash_loop(name=f"{NAME}-b"))
    for order in ([healthy, pulling, crashing], [crashing, pulling, healthy]):
        found = pods.first_failure(order)
        assert found is not None and found.reason == pods.CRASH_LOOP and f"pod {NAME}-b " in found.message
    assert pods.first_failure([healthy]) is None and pods.first_failure([]) is None


def test_failure_memory_reports_changes_only() -> None:
    """The pod event handler's filter: a repeated failure or a healthy pod's event is no change."""
    memory = FailureMemory()
    pod = (NAMESPACE, POD)
    first = failure_of(crash_loop())
    assert memory.changed(pod, None) is False  # healthy and never failing: nothing kept
    assert memory.changed(pod, first) is True and len(memory) == 1
    assert memory.changed(pod, failure_of(crash_loop(restarts=7))) is False  # the count alone
    assert memory.changed(pod, failure_of(crash_loop(VLLM_CRASH + "again"))) is True
    assert memory.changed(pod, None) is True and len(memory) == 0
    assert memory.changed(pod, None) is False


# ---------------------------------------------------------------------------------------------
# Conditions
# ---------------------------------------------------------------------------------------------


def _desired_and_deployment(**deployment_status: Any) -> tuple[pipeline.Desired, dict[str, Any]]:
    desired = pipeline.compute(resource(), ModelResolver(), _h100_inventory())
    assert desired.child("Deployment") is not None
    return desired, stored(diffing.stamped(desired.child("Deployment")), "12", **deployment_status)


def _lifecycle(pod_views: list[PodView], spec_replicas: int = 1, **deployment_status: Any) -> dict[str, Any]:
    desired, deployment = _desired_and_deployment(**deployment_status)
    return {c.type: c for c in status.lifecycle_conditions(desired, deployment, spec_replicas, pod_views)}


def test_a_crashing_engine_is_degraded_and_not_ready() -> None:
    conds = _lifecycle([pods.project(crash_loop())], replicas=1, updatedReplicas=1)
    degraded, ready = conds[api.DEGRADED], conds[api.READY]
    assert (degraded.status, degraded.reason) == ("True", pods.CRASH_LOOP)
    assert degraded.message.endswith(LAST_LINE) and f"pod {POD}" in degraded.message
    assert (ready.status, ready.reason, ready.message) == ("False", pods.CRASH_LOOP, "0/1 replicas ready")
    assert (conds[api.PROGRESSING].status, conds[api.PROGRESSING].reason) == ("True", "RollingOut")


def test_an_engine_failure_is_more_specific_than_the_progress_deadline() -> None:
    deadline = {
        "type": "Progressing",
        "status": "False",
        "reason": "ProgressDeadlineExceeded",
        "message": "slow",
    }
    pulling = pods.project(pod_body(state=waiting("ImagePullBackOff", "back-off")))
    conds = _lifecycle([pulling], replicas=1, updatedReplicas=1, conditions=[deadline])
    assert conds[api.DEGRADED].reason == pods.IMAGE_PULL_FAILED
    conds = _lifecycle([], replicas=1, updatedReplicas=1, conditions=[deadline])
    assert (conds[api.DEGRADED].reason, conds[api.DEGRADED].message) == ("RolloutFailed", "slow")


def test_enough_ready_replicas_keep_ready_true_while_one_pod_fails() -> None:
    """Two of two ready but the rollout unfinished (a third, surplus pod crashes): still Ready."""
    status_ = {"observedGeneration": 1, "replicas": 3, "readyReplicas": 2, "updatedReplicas": 1}
    conds = _lifecycle([pods.project(crash_loop())], spec_replicas=2, **status_)
    assert (conds[api.READY].status, conds[api.READY].reason) == ("True", "Ready")
    assert (conds[api.DEGRADED].status, conds[api.DEGRADED].reason) == ("True", pods.CRASH_LOOP)


def test_a_complete_rollout_is_not_degraded_by_a_stale_pod() -> None:
    conds = _lifecycle([pods.project(crash_loop())], **rolled_out())
    assert (conds[api.DEGRADED].status, conds[api.DEGRADED].reason) == ("False", "AsExpected")
    assert conds[api.READY].reason == "Ready"


def test_a_new_restart_count_alone_writes_no_status_but_a_new_error_does() -> None:
    """status_for compares what the pods add: the count alone is no write, a new message is
    (without a new event: the condition's status and reason did not move)."""
    body = resource()
    desired, deployment = _desired_and_deployment(replicas=1, updatedReplicas=1)
    patch, transitions = status.status_for(body, desired, deployment, [pods.project(crash_loop())])
    assert patch is not None
    assert conditions_of(patch)[api.DEGRADED] == ("True", pods.CRASH_LOOP)
    assert (api.DEGRADED, "True", pods.CRASH_LOOP) in [(t.type, t.status, t.reason) for t in transitions]
    body = with_status(body, patch, "20")

    assert status.status_for(body, desired, deployment, [pods.project(crash_loop(restarts=4))]) == (None, [])
    other = "ValueError: --max-model-len 262144 exceeds the model's max_position_embeddings 40960"
    again, moved = status.status_for(body, desired, deployment, [pods.project(crash_loop(other))])
    assert again is not None and moved == []
    degraded = next(c for c in again["conditions"] if c["type"] == api.DEGRADED)
    assert degraded["message"].endswith(other)


# ---------------------------------------------------------------------------------------------
# One reconcile pass through the reconcile tests' fakes
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def harness() -> Iterator[Harness]:
    """The reconcile tests' Reconciler over fakes, with the seed's catalog-backed resolver."""
    with reconciler_over_fakes(ModelResolver()) as h:
        yield h


def _pod_event(h: Harness, body: dict[str, Any] | None, name: str = POD) -> tuple[int, int]:
    """A pod watch event as handlers.on_pod passes it, the index updated first as kopf does it;
    (reconciles run, status patches sent)."""
    projection = None if body is None else pods.project(body)
    h.view.pod_views[KEY] = [] if projection is None else [projection]
    before, patches = sum(_outcome_counts().values()), len(h.kube.status_patches)
    h.deliver(lambda: h.reconciler.pod_changed(KEY, name, projection, h.view))
    return int(sum(_outcome_counts().values()) - before), len(h.kube.status_patches) - patches


def _deliver_status(h: Harness, version: str) -> None:
    h.view.resources[KEY] = with_status(h.view.resources[KEY], h.kube.status_patches[-1][1], version)


def test_a_crashing_engine_pod_reaches_status_and_an_event(harness: Harness) -> None:
    """The pod event reconciles the owner: Degraded=True with the engine's error, and a Warning."""
    converge_seed(harness)
    assert _pod_event(harness, crash_loop()) == (1, 1)

    assert harness.kube.applies == []
    ((_, patch),) = harness.kube.status_patches
    assert conditions_of(patch)[api.DEGRADED] == ("True", pods.CRASH_LOOP)
    assert conditions_of(patch)[api.READY] == ("False", pods.CRASH_LOOP)
    degraded = next(c for c in patch["conditions"] if c["type"] == api.DEGRADED)
    assert degraded["message"].endswith(LAST_LINE)
    # One Warning for one failure: Ready=False says the same in status.
    (event,) = harness.events.posted
    assert (event.name, event.type, event.reason) == (NAME, "Warning", pods.CRASH_LOOP)
    assert event.message == f"Degraded=True: {degraded['message']}"

    # The status is delivered; the next restart (the count only) neither reconciles nor writes,
    # and a pass run for another reason writes nothing either.
    _deliver_status(harness, "14")
    harness.quiet()
    assert _pod_event(harness, crash_loop(restarts=4)) == (0, 0)
    assert harness.run() == "converged"
    assert harness.kube.writes() == 0 and harness.events.posted == []


def test_pod_events_reconcile_only_when_the_failure_changes(harness: Harness) -> None:
    """pod_changed: healthy pods and repeated failures submit nothing; recovery and deletion do."""
    converge_seed(harness)
    assert _pod_event(harness, pod_body(phase="Pending", state=waiting("ContainerCreating"))) == (0, 0)
    assert _pod_event(harness, pod_body()) == (0, 0)
    assert _pod_event(harness, crash_loop(restarts=1)) == (1, 1)
    _deliver_status(harness, "20")
    assert _pod_event(harness, crash_loop(restarts=2)) == (0, 0)
    assert len(harness.reconciler.pod_failures) == 1

    # A new error from the engine is new information: one status write, no new event.
    harness.quiet()
    assert _pod_event(harness, crash_loop("ValueError: bad --max-model-len", restarts=3)) == (1, 1)
    assert harness.events.posted == []
    _deliver_status(harness, "21")

    # The engine comes up: the pod is ready and the Deployment rolled out.
    harness.view.deployments[KEY]["status"] = rolled_out()
    recovered = pod_body(ready=True, last_state=terminated(1, "Error", VLLM_CRASH), restarts=3)
    assert _pod_event(harness, recovered) == (1, 1)
    healed = harness.kube.status_patches[-1][1]
    assert conditions_of(healed)[api.DEGRADED] == ("False", "AsExpected")
    assert conditions_of(healed)[api.READY] == ("True", "Ready")
    assert len(harness.reconciler.pod_failures) == 0

    # A failing pod's deletion is a change; a healthy one's is not.
    other = f"{POD}-x"
    assert _pod_event(harness, crash_loop(name=other), name=other)[0] == 1
    assert _pod_event(harness, None, name=other)[0] == 1
    assert _pod_event(harness, None) == (0, 0)
    assert len(harness.reconciler.pod_failures) == 0


def test_the_engine_container_keeps_its_log_tail_as_termination_message(harness: Harness) -> None:
    """FallbackToLogsOnError: a crashed engine's last log lines become the termination message."""
    harness.view.add(resource())
    assert harness.run() == "converged"
    (engine,) = applied(harness.kube, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert engine["terminationMessagePolicy"] == "FallbackToLogsOnError"


# ---------------------------------------------------------------------------------------------
# The root cause from the crashed run's log
# ---------------------------------------------------------------------------------------------

ROOT_CAUSE = "ValueError: fc.weight has shape (128, 128), the checkpoint (128, 384)"
ENGINE_LOG = f"""\
(EngineCore_DP0 pid=97) ERROR 09-12 10:14:02 [core.py:700] EngineCore failed to start.
(EngineCore_DP0 pid=97) ERROR 09-12 10:14:02 [core.py:700] Traceback (most recent call last):
(EngineCore_DP0 pid=97) ERROR 09-12 10:14:02 [core.py:700]   File "core.py", line 83, in __init__
(EngineCore_DP0 pid=97) ERROR 09-12 10:14:02 [core.py:700]     self.model_executor = executor(config)
(EngineCore_DP0 pid=97) ERROR 09-12 10:14:02 [core.py:700] {ROOT_CAUSE}
{"".join(f"(APIServer pid=1) shutting down {i}{chr(10)}" for i in range(120))}\
Traceback (most recent call last):
  File "/usr/local/bin/vllm", line 10, in <module>
    sys.exit(main())
{LAST_LINE}
"""


def crashed_run(finished: str, restarts: int = 1) -> dict[str, Any]:
    """A crash loop whose last run ended at ``finished`` (each restart is a new run)."""
    body = crash_loop(VLLM_CRASH, restarts=restarts)
    container = body["status"]["containerStatuses"][0]
    container["lastState"]["terminated"]["finishedAt"] = finished
    body["metadata"]["labels"]["specdeploy.io/engine"] = "vllm"
    return body


def test_a_crashed_runs_log_is_read_once_and_its_root_cause_named(harness: Harness) -> None:
    """The termination message ends with vLLM's pointer; the log's end has the error: one read per
    run, bounded, and Degraded names the error with the log's last line after it."""
    converge_seed(harness)
    harness.kube.logs[POD] = ENGINE_LOG
    assert _pod_event(harness, crashed_run("2025-09-12T10:14:04Z")) == (1, 1)
    assert harness.kube.log_reads == [
        (NAMESPACE, pods.LogRead(POD, "engine", previous=True, finished="2025-09-12T10:14:04Z"))
    ]
    degraded = next(c for c in harness.kube.status_patches[-1][1]["conditions"] if c["type"] == api.DEGRADED)
    assert degraded["message"] == (
        f"pod {POD} container engine exited with code 1 (Error) and was restarted: "
        f"{ROOT_CAUSE} (the log ends: {LAST_LINE})"
    )
    _deliver_status(harness, "30")

    # Another pass, or another event of the same run (the count moved): no second read.
    assert harness.run() == "converged"
    _pod_event(harness, crashed_run("2025-09-12T10:14:04Z", restarts=2))
    assert len(harness.kube.log_reads) == 1
    # The next run that crashes is read once; a log without an exception keeps the message.
    harness.kube.logs[POD] = "INFO nothing to see\n" + LAST_LINE
    _pod_event(harness, crashed_run("2025-09-12T10:16:40Z", restarts=3))
    _pod_event(harness, crashed_run("2025-09-12T10:16:40Z", restarts=3))
    assert [read.finished for _, read in harness.kube.log_reads] == [
        "2025-09-12T10:14:04Z",
        "2025-09-12T10:16:40Z",
    ]
    degraded = next(c for c in harness.kube.status_patches[-1][1]["conditions"] if c["type"] == api.DEGRADED)
    assert degraded["message"].endswith(f"restarted: {VLLM_CRASH.strip()}")

    # Healthy again: nothing is kept for the pod.
    harness.view.deployments[KEY]["status"] = rolled_out()
    _pod_event(harness, pod_body(ready=True, restarts=3))
    assert len(harness.reconciler.engine_logs) == 0


def test_no_log_is_read_for_runs_that_say_nothing_of_a_cause(harness: Harness) -> None:
    """An OOM kill, an image pull failure, a clean exit or an unreadable log: no (second) read."""
    converge_seed(harness)
    oom = pod_body(
        state=waiting("CrashLoopBackOff", "back-off"), last_state=terminated(137, "OOMKilled"), restarts=1
    )
    _pod_event(harness, oom)
    _pod_event(harness, pod_body(state=waiting("ImagePullBackOff", "back-off")))
    _pod_event(harness, pod_body(last_state=terminated(0, "Completed"), restarts=1))
    assert harness.kube.log_reads == []
    _pod_event(harness, crashed_run("2025-09-12T10:14:04Z"))  # no log to read (403, say)
    assert harness.run() == "converged"
    assert len(harness.kube.log_reads) == 1
    degraded = next(c for c in harness.kube.status_patches[-1][1]["conditions"] if c["type"] == api.DEGRADED)
    assert degraded["message"].endswith(LAST_LINE)


def test_a_pod_no_node_fits_carries_the_schedulers_message_and_since_when() -> None:
    body = pod_body(phase="Pending")
    body["spec"].pop("nodeName")
    body["status"].pop("containerStatuses")
    message = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    body["status"]["conditions"] = [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": message,
            "lastTransitionTime": "2025-09-12T10:20:00Z",
        }
    ]
    waiting = pods.project(body)
    assert waiting.unschedulable == message
    assert waiting.unschedulable_since == datetime(2025, 9, 12, 10, 20, tzinfo=UTC).timestamp()
    assert pods.pod_failure(waiting) is None  # waiting for a node is no engine failure
    scheduled = pods.project(pod_body())
    assert scheduled.unschedulable == "" and pods.waiting_for_node([scheduled, waiting]) == waiting

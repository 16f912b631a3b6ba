"""Pod status of engine-node pods, built from their containers' state."""

from __future__ import annotations

import pytest

from specdeploy_sandbox.enginenode.pod_status import (
    ContainerView,
    Running,
    Terminated,
    Waiting,
    container_status,
    pod_phase,
    pod_status,
)

CRASHED = Terminated(3, "Error", "2026-01-01T00:00:00Z", "2026-01-01T00:00:05Z", "fatal", "sandbox://41")


def view(state: Waiting | Running | Terminated, **kwargs: object) -> ContainerView:
    return ContainerView(name="c", image="python:3.11", state=state, **kwargs)  # type: ignore[arg-type]


def test_container_status_carries_state_last_state_and_counts() -> None:
    status = container_status(view(
        Waiting("CrashLoopBackOff", "back-off 10s"), last_terminated=CRASHED, restart_count=2,
        image_id="sandbox-runtime://python/python:3.11",
    ))  # fmt: skip
    assert status == {
        "name": "c",
        "image": "python:3.11",
        "imageID": "sandbox-runtime://python/python:3.11",
        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s"}},
        "lastState": {"terminated": {
            "exitCode": 3, "reason": "Error", "startedAt": "2026-01-01T00:00:00Z",
            "finishedAt": "2026-01-01T00:00:05Z", "message": "fatal", "containerID": "sandbox://41",
        }},
        "ready": False,
        "started": False,
        "restartCount": 2,
    }  # fmt: skip
    running = container_status(view(Running("2026-01-01T00:00:06Z"), container_id="sandbox://42", ready=True))
    assert running["state"] == {"running": {"startedAt": "2026-01-01T00:00:06Z"}}
    assert (running["containerID"], running["ready"], running["lastState"]) == ("sandbox://42", True, {})


DONE = Terminated(0, "Completed", "a", "b")


@pytest.mark.parametrize(
    ("states", "policy", "phase"),
    [
        ([view(Waiting("ContainerCreating"))], "Always", "Pending"),
        ([view(Waiting("ErrImagePull")), view(Running("t"))], "Always", "Pending"),
        ([view(Running("t"))], "Always", "Running"),
        ([view(Waiting("CrashLoopBackOff"), last_terminated=CRASHED)], "Always", "Running"),
        ([view(DONE)], "Always", "Running"),
        ([view(DONE), view(DONE)], "OnFailure", "Succeeded"),
        ([view(DONE), view(CRASHED)], "Never", "Failed"),
        ([view(CRASHED)], "OnFailure", "Running"),
        ([view(DONE), view(Running("t"))], "Never", "Running"),
    ],
)
def test_phase_follows_kubelet(states: list[ContainerView], policy: str, phase: str) -> None:
    assert pod_phase(states, policy) == phase


def test_pod_status_ready_conditions_ip_and_kept_transition_times() -> None:
    kwargs = {"restart_policy": "Always", "pod_ip": "127.42.128.2", "host_ip": "127.0.0.1",
              "start_time": "2026-01-01T00:00:00Z"}  # fmt: skip
    starting = pod_status([view(Running("t"))], now="T1", **kwargs)  # type: ignore[arg-type]
    assert starting["phase"] == "Running"
    assert (starting["podIP"], starting["podIPs"], starting["hostIPs"]) == (
        "127.42.128.2", [{"ip": "127.42.128.2"}], [{"ip": "127.0.0.1"}],
    )  # fmt: skip
    conditions = {c["type"]: (c["status"], c["lastTransitionTime"]) for c in starting["conditions"]}
    assert conditions == {"PodScheduled": ("True", "T1"), "Initialized": ("True", "T1"),
                          "ContainersReady": ("False", "T1"), "Ready": ("False", "T1")}  # fmt: skip

    foreign = {"type": "DisruptionTarget", "status": "True", "lastTransitionTime": "T0"}
    ready = pod_status(
        [view(Running("t"), ready=True)],
        previous_conditions=[*starting["conditions"], foreign],
        now="T2",
        **kwargs,
    )
    conditions = {c["type"]: (c["status"], c["lastTransitionTime"]) for c in ready["conditions"]}
    assert conditions == {"PodScheduled": ("True", "T1"), "Initialized": ("True", "T1"),
                          "ContainersReady": ("True", "T2"), "Ready": ("True", "T2"),
                          "DisruptionTarget": ("True", "T0")}  # fmt: skip

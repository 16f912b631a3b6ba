"""A real engine: the tiny EAGLE-3 pair served by vLLM (CPU build) on a sandbox engine node.

The sandbox, its model hub, the operator and the two tiny pairs are shared with the other engine
tests (``conftest.py``): the first test here watches the pairs load, the others start at most one
short-lived engine beside them, and the deletion test runs after every other user of the pairs.
"""

from __future__ import annotations

import json
import time
import urllib.error
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from enginelib import (
    ALL,
    API_KEY,
    API_KEY_SECRET,
    ENGINE_READY_S,
    NONE,
    NS,
    apply_pairs,
    complete,
    engine_counters,
    health,
    pod_ready,
    pods,
    resource,
    sdep_when,
)
from specdeploy_sandbox import tiny_models
from specdeploy_sandbox.cluster import Sandbox
from specdeploy_sandbox.commands.demo import chat
from specdeploy_sandbox.operator_process import LocalOperator
from support.kube import Kubectl, WaitFor, condition, events, get

GRACE_S = 60.0
MODEL = "sandbox/tiny-qwen3"


def _engine_processes(agent_pid: int) -> list[psutil.Process]:
    """Every live process the engine node started (its pods' process trees)."""
    try:
        return psutil.Process(agent_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _agent_pid(sandbox: Sandbox) -> int:
    (agent,) = [c for c in sandbox.components() if c.name.startswith("engine-node/")]
    return agent.pid


def _container_pid(pod: dict[str, Any]) -> int:
    return int(pod["status"]["containerStatuses"][0]["containerID"].rsplit("/", 1)[-1])


def test_the_example_runs_real_vllm_with_speculative_decoding(
    engine_sandbox: Sandbox, engine_operator: LocalOperator, k: Kubectl, wait: WaitFor
) -> None:
    """The example (the shared accept-all pair, applied with its accept-none twin) loads, turns
    Ready only once the engine answers, runs exactly its status command and drafts."""
    name = ALL
    apply_pairs(k)
    pod = wait(lambda: next(iter(pods(k, name)), None), 120, "the engine pod")
    ip = wait(lambda: pods(k, name)[0]["status"].get("podIP"), 120, "the pod's IP")

    # Ready follows the engine's readiness probe: never Ready while /health does not answer.
    saw_unready_running = False
    deadline = time.monotonic() + ENGINE_READY_S
    while time.monotonic() < deadline:
        pod = pods(k, name)[0]
        healthy = health(ip)
        if pod_ready(pod):
            assert health(ip), "the pod is Ready but the engine does not answer /health"
            break
        saw_unready_running |= pod["status"].get("phase") == "Running" and not healthy
        time.sleep(1)
    else:
        pytest.fail(f"the engine pod was not Ready within {ENGINE_READY_S:.0f}s\n{wait.snapshot()}")
    assert saw_unready_running, "the pod was never seen Running-but-not-Ready while the engine loaded"
    body = wait(
        lambda: sdep_when(k, name, "Ready", "True"),
        60,
        "the SpeculativeDeployment to be Ready",
    )

    # The engine node ran exactly the command the operator put in status.
    command = body["status"]["command"]
    argv = psutil.Process(_container_pid(pod)).cmdline()
    script = next(i for i, arg in enumerate(argv) if Path(arg).name == command[0])
    assert argv[script + 1 :] == command[1:]
    assert "--speculative-config" in command

    reply = chat(f"http://{ip}:8000", "sandbox/tiny-qwen3")
    assert reply, "the completion returned no text"
    counters = engine_counters(ip)
    assert counters["vllm:spec_decode_num_drafts_total"] > 0
    # Every proposal of the accept-all draft is accepted.
    accepted = counters["vllm:spec_decode_num_accepted_tokens_total"]
    assert accepted == counters["vllm:spec_decode_num_draft_tokens_total"]
    assert "Initializing a V1 LLM engine" in k("logs", "-n", NS, pod["metadata"]["name"])


def test_an_api_key_guards_completions_but_not_probes_or_metrics(
    pairs: dict[str, str], engine_operator: LocalOperator, k: Kubectl
) -> None:
    """The accept-none pair requires the key of its Secret: a completion without it (or with
    another) gets 401, one with it a completion; /health and /metrics, which the probes and the
    acceptance reader use, answer without it; and the key shows nowhere the operator writes."""
    ip = pairs[NONE]
    for sent in (None, "sk-wrong"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            complete(ip, MODEL, 4, api_key=sent)
        assert refused.value.code == 401, sent
    assert complete(ip, MODEL, 4, api_key=API_KEY) == 4
    assert health(ip) and engine_counters(ip)["vllm:spec_decode_num_drafts_total"] > 0
    pod = pods(k, NONE)[0]
    assert pod_ready(pod)
    [engine] = [c for c in pod["spec"]["containers"] if c["name"] == "engine"]
    assert {
        "name": "VLLM_API_KEY",
        "valueFrom": {"secretKeyRef": {"name": API_KEY_SECRET, "key": "apiKey"}},
    } in (engine["env"])
    body = get(k, NS, "sdep", NONE)
    seen = [
        json.dumps(body),
        json.dumps(pod),
        k("get", "-n", NS, "events", "-o", "json"),
        engine_operator.log_tail(10_000),
    ]
    assert not [text for text in seen if API_KEY in text]


def test_deleting_a_pair_stops_every_engine_process_within_the_grace_period(
    pairs: dict[str, str], k: Kubectl, wait: WaitFor
) -> None:
    """Run after every other user of the accept-none pair (the demo keeps the example)."""
    pid = _container_pid(pods(k, NONE)[0])
    processes = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    started = time.monotonic()
    k("delete", "-n", NS, "sdep", NONE, "--wait=false")
    _, alive = psutil.wait_procs(processes, timeout=GRACE_S + 15)
    assert not alive, f"engine processes left after deletion: {alive}"
    wait(lambda: not pods(k, NONE), 60, "the engine pod to be deleted")
    print(f"\nengine processes stopped {time.monotonic() - started:.1f}s after the delete")


def test_a_refused_pair_never_reaches_an_engine(
    engine_sandbox: Sandbox, pairs: dict[str, str], k: Kubectl, wait: WaitFor
) -> None:
    name = "refused"
    before = {p.pid for p in _engine_processes(_agent_pid(engine_sandbox))}
    applied = k.run("apply", "-n", NS, "-f", "-", input=resource(name, tiny_models.MISMATCHED))
    if applied.returncode != 0:
        assert "hidden size" in applied.stderr, applied.stderr
    else:
        body = wait(
            lambda: sdep_when(k, name, "PairingVerified"),
            120,
            "the pairing verdict",
        )
        verdict = condition(body, "PairingVerified")
        assert (verdict["status"], verdict["reason"]) == ("False", "HiddenSizeMismatch"), verdict
        time.sleep(5)  # room for a wrong Deployment to show up
        assert not get(k, NS, "deployments", "-l", f"app.kubernetes.io/instance={name}")["items"]
        assert not pods(k, name)
    assert {p.pid for p in _engine_processes(_agent_pid(engine_sandbox))} == before
    k.run("delete", "-n", NS, "sdep", name, "--ignore-not-found")


def test_an_engine_that_fails_to_load_shows_its_error_in_status(
    engine_operator: LocalOperator, k: Kubectl, wait: WaitFor
) -> None:
    """The broken draft passes the pairing check (the tokenizer rule too, on the files the
    operator fetched through the sandbox's hub), then vLLM fails to load it. Its log ends with
    "Engine core initialization failed. See root cause above.": Degraded names the real error,
    read from the crashed run's log, and that pointer after it."""
    name = "broken-draft"
    k("apply", "-n", NS, "-f", "-", input=resource(name, tiny_models.BROKEN))

    def explained() -> dict[str, Any] | None:
        body = sdep_when(k, name, "Degraded", "True")
        return body if body and "Tried to load weights" in condition(body, "Degraded")["message"] else None

    body = wait(explained, ENGINE_READY_S, "the engine's root cause in status")
    degraded = condition(body, "Degraded")
    assert degraded["reason"] == "EngineCrashLoop", degraded
    head, cause = degraded["message"].split(": ", 1)
    assert head.startswith(f"pod {name}-") and "exited with code 1" in head, degraded
    assert cause.startswith("AssertionError: Tried to load weights of size torch.Size([128, 128])"), degraded
    assert "(the log ends: RuntimeError: Engine core initialization failed. See root cause above." in cause
    assert condition(body, "Ready")["status"] == "False"
    (tokenizer,) = [c for c in body["status"]["pairing"]["checks"] if c["name"] == "tokenizer"]
    assert (tokenizer["status"], tokenizer["reason"]) == ("Passed", "Match"), tokenizer
    posted = events(k, NS, name)
    assert any(e["reason"] == "EngineCrashLoop" and e["type"] == "Warning" for e in posted), posted
    k("delete", "-n", NS, "sdep", name)


def test_an_image_the_node_cannot_run_shows_as_a_pull_failure_in_status(
    pairs: dict[str, str], k: Kubectl, wait: WaitFor
) -> None:
    name = "unknown-image"
    body = yaml.safe_load(resource(name, tiny_models.ACCEPT_ALL))
    body["spec"]["engine"]["image"] = "registry.example/unknown/vllm:v0"
    k("apply", "-n", NS, "-f", "-", input=yaml.safe_dump(body))
    body = wait(lambda: sdep_when(k, name, "Degraded", "True"), 120, "the pull failure in status")
    degraded = condition(body, "Degraded")
    assert degraded["reason"] == "EngineImagePullFailed", degraded
    assert "registry.example/unknown/vllm:v0" in degraded["message"], degraded
    k("delete", "-n", NS, "sdep", name)

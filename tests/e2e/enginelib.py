"""Helpers for the end-to-end tests on the sandbox's engine node (real vLLM on CPU)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from clusterlib import Kubectl, WaitFor

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "manifests" / "examples" / "sandbox-tiny-eagle3.yaml"
NS = "engines"
ENGINE_READY_S = 600.0


def resource(name: str, speculator: str, **spec: Any) -> str:
    """The tiny example under another name and speculator, with extra spec fields."""
    body = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"]["name"] = name
    body["spec"]["speculator"]["model"] = speculator
    body["spec"].update(spec)
    return yaml.safe_dump(body)


def get(k: Kubectl, *what: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(k("get", "-n", NS, *what, "-o", "json"))
    return result


def pods(k: Kubectl, name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = get(k, "pods", "-l", f"app.kubernetes.io/instance={name}")["items"]
    return items


def condition(body: dict[str, Any], type_: str) -> dict[str, Any]:
    found = [c for c in (body.get("status") or {}).get("conditions") or [] if c["type"] == type_]
    return found[0] if found else {}


def sdep_when(k: Kubectl, name: str, type_: str, status: str | None = None) -> dict[str, Any] | None:
    """The resource once its ``type_`` condition exists (with ``status``, when given)."""
    body = get(k, "sdep", name)
    found = condition(body, type_)
    return body if found and (status is None or found["status"] == status) else None


def health(ip: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{ip}:8000/health", timeout=2) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.HTTPError):
        return False


def complete(ip: str, model: str, tokens: int, timeout: float = 120.0) -> int:
    """One greedy completion of exactly ``tokens`` tokens; the tokens the engine reports."""
    request = urllib.request.Request(
        f"http://{ip}:8000/v1/completions",
        data=json.dumps(
            {"model": model, "prompt": "hello", "max_tokens": tokens, "temperature": 0, "ignore_eos": True}
        ).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return int(json.loads(response.read())["usage"]["completion_tokens"])


def engine_counters(ip: str) -> dict[str, float]:
    """The engine's own speculative decoding counters, summed over label sets."""
    with urllib.request.urlopen(f"http://{ip}:8000/metrics", timeout=10) as response:
        text = response.read().decode()
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("vllm:spec_decode_num_") and sample.name.endswith("_total"):
                totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return totals


def pod_ready(pod: dict[str, Any]) -> bool:
    return condition(pod, "Ready").get("status") == "True"


@contextmanager
def ready_pairs(k: Kubectl, wait: WaitFor, pairs: dict[str, str], **spec: Any) -> Iterator[dict[str, str]]:
    """The tiny pairs ``{name: speculator}`` applied side by side and Ready; yields their pod IPs
    by name, and deletes them (waiting for their pods to go) afterwards."""
    for name, draft in pairs.items():
        k("apply", "-n", NS, "-f", "-", input=resource(name, draft, **spec))
    try:
        for name in pairs:
            wait(lambda name=name: sdep_when(k, name, "Ready", "True"), ENGINE_READY_S, f"{name} to be Ready")
        yield {name: pods(k, name)[0]["status"]["podIP"] for name in pairs}
    finally:
        for name in pairs:
            k("delete", "-n", NS, "sdep", name, "--wait=false")
        wait(lambda: not any(pods(k, name) for name in pairs), 120, "the engine pods to be deleted")

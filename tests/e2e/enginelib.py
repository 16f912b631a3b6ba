"""Helpers for the end-to-end tests on the sandbox's engine node (real vLLM on CPU), and the two
tiny pairs every one of them shares (see ``conftest.py``)."""

from __future__ import annotations

import json
import secrets
import urllib.error
import urllib.request
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from specdeploy_sandbox import tiny_models
from support.kube import Kubectl, condition, get
from support.paths import TINY_EXAMPLE

# Where `specdeploy demo` applies the tiny example, so the demo finds the shared pair running.
NS = "default"
# The tiny example itself (every proposal accepted), and the same pair with the draft whose every
# proposal is refused.
ALL = "tiny-qwen3-eagle3"
NONE = "tiny-qwen3-eagle3-accept-none"
PAIRS = {ALL: tiny_models.ACCEPT_ALL, NONE: tiny_models.ACCEPT_NONE}
ENGINE_READY_S = 600.0
# The accept-none pair requires an API key (spec.engine.apiKeySecretRef), so every test that
# reads it (probes, acceptance, benchmarks) runs against a guarded engine; the example does not,
# as README applies it. The key is this session's own.
API_KEY_SECRET = "tiny-engine-api-key"
API_KEY = f"sk-e2e-{secrets.token_hex(8)}"
KEYS = {NONE: API_KEY}


def resource(name: str, speculator: str, **spec: Any) -> str:
    """The tiny example under another name and speculator, with extra spec fields."""
    body = yaml.safe_load(TINY_EXAMPLE.read_text())
    body["metadata"]["name"] = name
    body["spec"]["speculator"]["model"] = speculator
    body["spec"].update(spec)
    return yaml.safe_dump(body)


def apply_pairs(k: Kubectl) -> None:
    """Apply both shared pairs (unchanged when they run already): the example as written, and
    the accept-none variant, which requires the API key of its Secret."""
    k("apply", "-n", NS, "-f", str(TINY_EXAMPLE))
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": API_KEY_SECRET},
        "stringData": {"apiKey": API_KEY},
    }
    k("apply", "-n", NS, "-f", "-", input=json.dumps(secret))
    engine = {
        **yaml.safe_load(TINY_EXAMPLE.read_text())["spec"]["engine"],
        "apiKeySecretRef": {"name": API_KEY_SECRET},
    }
    k("apply", "-n", NS, "-f", "-", input=resource(NONE, PAIRS[NONE], engine=engine))


def pods(k: Kubectl, name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = get(k, NS, "pods", "-l", f"app.kubernetes.io/instance={name}")["items"]
    return items


def sdep_when(k: Kubectl, name: str, type_: str, status: str | None = None) -> dict[str, Any] | None:
    """The resource once its ``type_`` condition exists (with ``status``, when given)."""
    body = get(k, NS, "sdep", name)
    found = condition(body, type_)
    return body if found and (status is None or found["status"] == status) else None


def health(ip: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{ip}:8000/health", timeout=2) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.HTTPError):
        return False


def complete(ip: str, model: str, tokens: int, timeout: float = 120.0, api_key: str | None = None) -> int:
    """One greedy completion of exactly ``tokens`` tokens (sending ``api_key`` as the bearer
    token, when given); the tokens the engine reports."""
    headers = {"Content-Type": "application/json"}
    if api_key is not None:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(
        f"http://{ip}:8000/v1/completions",
        data=json.dumps(
            {"model": model, "prompt": "hello", "max_tokens": tokens, "temperature": 0, "ignore_eos": True}
        ).encode(),
        headers=headers,
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


def pod_ip(k: Kubectl, name: str) -> str:
    return str(pods(k, name)[0]["status"]["podIP"])

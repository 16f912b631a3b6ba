"""Thin kubernetes-client calls the handlers make (blocking; handlers run them in threads)."""

from __future__ import annotations

import base64
import functools
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from specdeploy import __version__, api

APPLY_CONTENT_TYPE = "application/apply-patch+yaml"
USER_AGENT = f"specdeploy/{__version__}"


@functools.cache
def _api() -> client.ApiClient:
    """One shared client that names the operator in the apiserver's audit log."""
    api_client = client.ApiClient()
    api_client.user_agent = USER_AGENT
    return api_client


def load_config() -> None:
    """In-cluster credentials when running as a pod, else the current kubeconfig."""
    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config()  # type: ignore[no-untyped-call]


def apply(manifest: dict[str, Any], field_manager: str) -> None:
    """Server-side apply, forcing ownership of exactly the fields the operator sets."""
    meta = manifest["metadata"]
    kind = manifest["kind"]
    kwargs: dict[str, Any] = {
        "name": meta["name"],
        "namespace": meta["namespace"],
        "body": manifest,
        "field_manager": field_manager,
        "force": True,
        "_content_type": APPLY_CONTENT_TYPE,
    }
    if kind == "Deployment":
        client.AppsV1Api(_api()).patch_namespaced_deployment(**kwargs)
    elif kind == "Service":
        client.CoreV1Api(_api()).patch_namespaced_service(**kwargs)
    else:
        raise ValueError(f"no apply for kind {kind}")


def patch_status(key: tuple[str | None, str], status: dict[str, Any]) -> None:
    namespace, name = key
    if namespace is None:
        raise ValueError(f"{api.KIND} {name} has no namespace")
    client.CustomObjectsApi(_api()).patch_namespaced_custom_object_status(
        api.GROUP, api.VERSION, namespace, api.PLURAL, name, {"status": status}
    )


def configmap_reader(namespace: str, name: str) -> dict[str, str] | None:
    """Data of a ConfigMap, or None when it does not exist."""
    try:
        cm = client.CoreV1Api(_api()).read_namespaced_config_map(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return dict(cm.data or {})


def secret_reader(namespace: str, name: str, key: str) -> str | None:
    """One key of a Secret, decoded; None when the Secret or the key is missing."""
    try:
        secret = client.CoreV1Api(_api()).read_namespaced_secret(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    value = (secret.data or {}).get(key)
    return base64.b64decode(value).decode() if value else None

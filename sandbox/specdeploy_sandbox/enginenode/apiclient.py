"""The agent's calls to the apiserver, on plain dicts (camelCase JSON, as the API serves it).

Watches get their own ApiClient so a long-lived stream never waits for a connection that status
writes need. Every call has a timeout; callers retry.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from specdeploy_sandbox.enginenode.environment import Kind

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
FIELD_MANAGER = "sandbox-engine-node"
TIMEOUT = (5.0, 20.0)
LEASE_NAMESPACE = "kube-node-lease"
LEASE_SECONDS = 40

log = logging.getLogger(__name__)


class Gone(Exception):
    """The watch's resourceVersion is too old (410): list again."""


def _json(response: Any) -> Any:
    return json.loads(response.data)


def status_code(exc: BaseException) -> int | None:
    """The HTTP status of a kubernetes ApiException, else None."""
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) else None


class Kube:
    def __init__(self, kubeconfig: Path) -> None:
        from kubernetes import client, config

        def api_client() -> Any:
            return config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]

        self.core = client.CoreV1Api(api_client())
        self.leases = client.CoordinationV1Api(self.core.api_client)
        self._watch_core = client.CoreV1Api(api_client())

    # -- list and watch --------------------------------------------------------------------------

    def list_pods(self, node: str) -> tuple[list[dict[str, Any]], str]:
        body = _json(self.core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={node}", _preload_content=False, _request_timeout=TIMEOUT,
        ))  # fmt: skip
        return body["items"], body["metadata"]["resourceVersion"]

    def list_nodes(self, node: str) -> tuple[list[dict[str, Any]], str]:
        body = _json(self.core.list_node(
            field_selector=f"metadata.name={node}", _preload_content=False, _request_timeout=TIMEOUT,
        ))  # fmt: skip
        return body["items"], body["metadata"]["resourceVersion"]

    def watch(self, kind: str, node: str, resource_version: str, seconds: int) -> Iterator[dict[str, Any]]:
        """Watch events of the node's pods (``kind`` "pods") or of the node itself ("nodes").

        Ends when the server closes the stream after ``seconds``; raises Gone on 410.
        """
        call: Any
        if kind == "pods":
            call, selector = self._watch_core.list_pod_for_all_namespaces, f"spec.nodeName={node}"
        else:
            call, selector = self._watch_core.list_node, f"metadata.name={node}"
        try:
            response = call(
                watch=True, field_selector=selector, resource_version=resource_version,
                timeout_seconds=seconds, allow_watch_bookmarks=True, _preload_content=False,
                _request_timeout=(TIMEOUT[0], seconds + 30),
            )  # fmt: skip
        except Exception as exc:
            if status_code(exc) == 410:
                raise Gone() from exc
            raise
        from kubernetes.watch.watch import iter_resp_lines

        try:
            for line in iter_resp_lines(response):  # type: ignore[no-untyped-call]
                if not line:
                    continue
                event: dict[str, Any] = json.loads(line)
                if event.get("type") == "ERROR":
                    if (event.get("object") or {}).get("code") == 410:
                        raise Gone()
                    raise RuntimeError(f"watch error: {event.get('object')}")
                yield event
        finally:
            response.release_conn()

    # -- pods ------------------------------------------------------------------------------------

    def patch_pod_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        """Merge patch: the lists we send (conditions, containerStatuses) replace the old ones whole."""
        self.core.patch_namespaced_pod_status(
            name, namespace, {"status": dict(status)}, _content_type=MERGE_PATCH,
            _preload_content=False, _request_timeout=TIMEOUT,
        )  # fmt: skip

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        """Delete now (the processes are gone), only the pod with this uid; a missing pod is fine."""
        from kubernetes.client import V1DeleteOptions, V1Preconditions

        options = V1DeleteOptions(grace_period_seconds=0, preconditions=V1Preconditions(uid=uid))
        try:
            self.core.delete_namespaced_pod(
                name, namespace, body=options, _preload_content=False, _request_timeout=TIMEOUT
            )
        except Exception as exc:
            if status_code(exc) not in (404, 409):
                raise

    def read_data(self, kind: Kind, namespace: str, name: str) -> dict[str, str] | None:
        """A Secret's (decoded) or ConfigMap's data; None if it does not exist."""
        read = self.core.read_namespaced_secret if kind == "Secret" else self.core.read_namespaced_config_map
        try:
            body = _json(read(name, namespace, _preload_content=False, _request_timeout=TIMEOUT))
        except Exception as exc:
            if status_code(exc) == 404:
                return None
            raise
        data = dict(body.get("data") or {})
        if kind == "Secret":
            return {k: base64.b64decode(v).decode(errors="replace") for k, v in data.items()}
        binary = body.get("binaryData") or {}
        return data | {k: base64.b64decode(v).decode(errors="replace") for k, v in binary.items()}

    # -- the node --------------------------------------------------------------------------------

    def patch_node_status(self, node: str, status: Mapping[str, Any]) -> None:
        """Strategic merge: conditions merge by type, so other writers' conditions stay."""
        self.core.patch_node_status(
            node, {"status": dict(status)}, _content_type=STRATEGIC_MERGE_PATCH,
            _preload_content=False, _request_timeout=TIMEOUT,
        )  # fmt: skip

    def renew_lease(self, node: str, node_uid: str, now: str) -> None:
        """Create or renew ``kube-node-lease/<node>`` (one server-side apply), owned by the Node."""
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": node, "namespace": LEASE_NAMESPACE,
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}],
            },
            "spec": {"holderIdentity": node, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": now},
        }  # fmt: skip
        self.leases.patch_namespaced_lease(
            node, LEASE_NAMESPACE, body, field_manager=FIELD_MANAGER, force=True,
            _content_type=APPLY_PATCH, _preload_content=False, _request_timeout=TIMEOUT,
        )  # fmt: skip

"""The apiserver calls a reconcile makes, through one client (blocking; run in the I/O pool)."""

from __future__ import annotations

import base64
import functools
import json
import logging
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, cast

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from specdeploy import __version__, api, children
from specdeploy.controller.pods import LOG_LIMIT_BYTES, LOG_TAIL_LINES, LOG_TIMEOUT_S, LogRead
from specdeploy.pipeline import ReadFailed, Unreachable

APPLY_CONTENT_TYPE = "application/apply-patch+yaml"
# An Event's message is meant for a person at a terminal; the apiserver's own limit is 1 KiB.
EVENT_MESSAGE_LIMIT = 1024
CUT = " ... "
USER_AGENT = f"specdeploy/{__version__}"
FIELD_MANAGER = "specdeploy"
# The KubeClient attribute holding the typed client of each built-in API group it writes: the
# kubernetes client names their methods ``<verb>_namespaced_<kind in snake case>``.
TYPED_CLIENTS = {"": "core", "apps": "apps", "batch": "batch", "policy": "policy"}

log = logging.getLogger(__name__)


# Answers to a write that name a problem with the object itself (invalid, refused by an admission
# policy, over a quota): retrying the same write cannot succeed until something changes.
REFUSED_STATUSES = (400, 403, 422)
# Server-side apply answers 500 when the object cannot be typed at all (a field the schema does
# not declare inside a free-form section, a quantity that does not parse): as permanent as a 422.
UNTYPABLE = ("failed to create typed patch object", "failed to convert new object")


class Refused(Exception):
    """The apiserver refused a child as written; the message is its own, naming the field."""


class ApiError(Exception):
    """Any other failed call, in one line (an ApiException's text carries every header): the
    work queue logs it and retries the pass."""


def refusal_message(exc: ApiException) -> str:
    """The message of the Status an API error carries (the HTTP reason when it has none)."""
    try:
        status = json.loads(exc.body or "{}")
    except ValueError:
        status = {}
    message = status.get("message") if isinstance(status, dict) else None
    return str(message or f"HTTP {exc.status} {exc.reason}")


def event_message(message: str) -> str:
    """``message`` within the apiserver's limit, its middle cut: the start names the pod, the end
    holds the engine's error."""
    if len(message) <= EVENT_MESSAGE_LIMIT:
        return message
    keep = (EVENT_MESSAGE_LIMIT - len(CUT)) // 2
    return message[:keep] + CUT + message[-keep:]


def load_config() -> None:
    """In-cluster credentials when running as a pod, else the current kubeconfig."""
    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config()  # type: ignore[no-untyped-call]


class KubeClient:
    """One shared API client that names the operator in the apiserver's audit log.

    The API groups are built on first use: they import several hundred kubernetes-client modules
    (about 25 MiB), which an operator with nothing to write never needs.
    """

    def __init__(self, field_manager: str = FIELD_MANAGER, connections: int = 10) -> None:
        self.field_manager = field_manager
        self.connections = connections

    @functools.cached_property
    def api_client(self) -> client.ApiClient:
        # One pooled connection per thread that calls the API: with fewer, urllib3 discards (and
        # reopens) a TLS connection for every call beyond the pool in a burst.
        configuration = client.Configuration.get_default_copy()
        configuration.connection_pool_maxsize = self.connections
        api_client = client.ApiClient(configuration)
        api_client.user_agent = USER_AGENT
        return api_client

    @functools.cached_property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api_client)

    @functools.cached_property
    def apps(self) -> client.AppsV1Api:
        return client.AppsV1Api(self.api_client)

    @functools.cached_property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api_client)

    @functools.cached_property
    def batch(self) -> client.BatchV1Api:
        return client.BatchV1Api(self.api_client)

    @functools.cached_property
    def policy(self) -> client.PolicyV1Api:
        return client.PolicyV1Api(self.api_client)

    def apply(self, manifest: dict[str, Any]) -> None:
        """Server-side apply, forcing ownership of exactly the fields the operator sets."""
        meta = manifest["metadata"]
        kind = manifest["kind"]
        kwargs: dict[str, Any] = {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "body": manifest,
            "field_manager": self.field_manager,
            "force": True,
            "_content_type": APPLY_CONTENT_TYPE,
            "_preload_content": False,
        }
        patch = self.route("patch", manifest)
        try:
            _discard(patch(**kwargs))
        except ApiException as exc:
            if exc.status == 404:
                # Apply creates what is missing: only a namespace being deleted answers 404,
                # and the owner's own DELETED event drops what is held for it.
                log.debug("namespace %s is gone; %s %s is not applied", meta["namespace"], kind, meta["name"])
                return
            message = refusal_message(exc)
            if exc.status in REFUSED_STATUSES or (exc.status == 500 and message.startswith(UNTYPABLE)):
                raise Refused(f"the apiserver refused the {kind}: {message}") from exc
            raise ApiError(f"apply of {kind} {meta['name']}: {message}") from exc

    def delete(self, manifest: dict[str, Any]) -> None:
        """Delete the engine child a resource no longer runs (its pods go with it, in the
        background); one already gone is fine."""
        meta = manifest["metadata"]
        delete = self.route("delete", manifest)
        try:
            _discard(
                delete(
                    name=meta["name"],
                    namespace=meta["namespace"],
                    propagation_policy="Background",
                    _preload_content=False,
                )
            )
        except ApiException as exc:
            if exc.status != 404:
                raise ApiError(
                    f"delete of {manifest['kind']} {meta['name']}: {refusal_message(exc)}"
                ) from exc

    def route(self, verb: str, manifest: dict[str, Any]) -> Callable[..., Any]:
        """The client call that does ``verb`` (patch, delete) to one namespaced object, called
        with its name, namespace and the verb's options.

        A child kind is looked up in ``children.CHILD_KINDS`` (one a CRD serves goes through the
        custom objects API); any other kind (the benchmark's Job) by its apiVersion."""
        kind = manifest["kind"]
        child = children.BY_KIND.get(kind)
        if child is not None and child.crd:
            custom = getattr(self.custom, f"{verb}_namespaced_custom_object")
            return functools.partial(custom, child.group, child.version, plural=child.plural)
        group = child.group if child is not None else str(manifest.get("apiVersion", "")).rpartition("/")[0]
        typed = TYPED_CLIENTS.get(group)
        name = f"{verb}_namespaced_{_snake(kind)}"
        method = None if typed is None else getattr(getattr(self, typed), name, None)
        if method is None:
            raise ValueError(f"no {verb} for kind {kind}")
        return cast(Callable[..., Any], method)

    def serves(self, group: str, version: str) -> bool:
        """Whether the apiserver serves ``group/version`` (discovery, one GET)."""
        try:
            _discard(self.custom.get_api_resources(group, version, _preload_content=False))
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise ApiError(f"discovery of {group}/{version}: {refusal_message(exc)}") from exc
        return True

    def patch_status(self, key: tuple[str | None, str], status: dict[str, Any]) -> None:
        namespace, name = key
        if namespace is None:
            raise ValueError(f"{api.KIND} {name} has no namespace")
        try:
            _discard(
                self.custom.patch_namespaced_custom_object_status(
                    api.GROUP,
                    api.VERSION,
                    namespace,
                    api.PLURAL,
                    name,
                    {"status": status},
                    _preload_content=False,
                )
            )
        except ApiException as exc:
            if exc.status == 404:
                # Deleted since the watch showed it; its DELETED event drops what is held for it.
                log.debug("%s/%s is gone; its status is not written", namespace, name)
                return
            raise ApiError(f"status of {namespace}/{name}: {refusal_message(exc)}") from exc

    def post_event(
        self, involved: dict[str, Any], type_: str, reason: str, message: str, name: str | None = None
    ) -> str | None:
        """A core/v1 Event on a SpeculativeDeployment (what ``kubectl describe`` lists); its name
        (``name``, else one made as client-go makes them), or None when the post failed.

        Posted by the operator itself rather than through kopf, whose poster works only inside a
        kopf handler's task: reconciles also run from retry timers and the engine metrics reader.
        A failed post is logged, never raised: an Event is a notice, status holds the truth.
        """
        meta = involved["metadata"]
        now = datetime.now(UTC).strftime(api.TIME_FORMAT)
        name = name or f"{meta['name']}.{time.time_ns():x}"
        message = event_message(message)
        # A plain body: the client's model classes cost more to build and serialise than the post.
        event: Any = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": api.API_VERSION,
                "kind": api.KIND,
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
            },
            "type": type_,
            "reason": reason,
            "message": message,
            "source": {"component": FIELD_MANAGER},
            "reportingComponent": FIELD_MANAGER,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            _discard(self.core.create_namespaced_event(meta["namespace"], event, _preload_content=False))
        except ApiException as exc:
            where = f"{meta['namespace']}/{meta['name']}"
            log.warning("could not post event %s on %s: %s", reason, where, refusal_message(exc))
            return None
        return name

    def raise_event_count(self, namespace: str, name: str, count: int) -> bool:
        """An Event seen again: its ``count`` and ``lastTimestamp`` moved (client-go's aggregation);
        False when it cannot be (expired by the apiserver's event TTL: post a new one)."""
        now = datetime.now(UTC).strftime(api.TIME_FORMAT)
        patch = {"count": count, "lastTimestamp": now}
        try:
            _discard(self.core.patch_namespaced_event(name, namespace, patch, _preload_content=False))
        except ApiException as exc:
            if exc.status != 404:
                log.warning("could not update event %s/%s: %s", namespace, name, refusal_message(exc))
            return False
        return True

    def read_log(self, namespace: str, read: LogRead) -> str | None:
        """The end of a crashed engine run's log (``LOG_TAIL_LINES``, at most ``LOG_LIMIT_BYTES``);
        None when it cannot be read (no ``pods/log`` permission, the run's log is gone), which
        leaves the termination message as the only detail."""
        try:
            response = self.core.read_namespaced_pod_log(
                read.pod,
                namespace,
                container=read.container,
                previous=read.previous,
                tail_lines=LOG_TAIL_LINES,
                limit_bytes=LOG_LIMIT_BYTES,
                _preload_content=False,
                _request_timeout=LOG_TIMEOUT_S,
            )
            # A urllib3 response (unparsed), though the client's stubs type it as the text.
            raw = cast(Any, response)
            data = bytes(raw.data)
            raw.release_conn()
            return data.decode("utf-8", errors="replace")
        except ApiException as exc:
            log.warning("cannot read the log of %s/%s: %s", namespace, read.pod, refusal_message(exc))
        except urllib3.exceptions.HTTPError as exc:
            log.warning("cannot read the log of %s/%s: %s", namespace, read.pod, exc)
        return None

    def read_configmap(self, namespace: str, name: str) -> dict[str, str] | None:
        """Data of a ConfigMap, or None when it does not exist (ReadFailed on any other refusal)."""
        cm = _unless_missing(self.core.read_namespaced_config_map, name, namespace)
        return None if cm is None else dict(cm.data or {})

    def read_secret(self, namespace: str, name: str, key: str) -> bytes | None:
        """One key of a Secret, decoded from base64; None when the Secret or the key is missing."""
        secret = _unless_missing(self.core.read_namespaced_secret, name, namespace)
        value = None if secret is None else (secret.data or {}).get(key)
        return base64.b64decode(value) if value is not None else None


def _snake(kind: str) -> str:
    """PodDisruptionBudget -> pod_disruption_budget, as the kubernetes client names its methods."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", kind).lower()


def _discard(response: Any) -> None:
    """Read a write's answer to its end, unparsed, and give the connection back to the pool (a
    urllib3 response, though the client's stubs type it as the model).

    Every write answers with the whole object; the client would build a typed model of it (a
    Deployment: hundreds of objects) that no reconcile reads: its watch event brings it anyway."""
    response.drain_conn()
    response.release_conn()


def _unless_missing(read: Callable[[str, str], Any], name: str, namespace: str) -> Any:
    """The object ``read`` returns, None on 404, ReadFailed (one line, for a condition) on any
    other API answer, Unreachable when the apiserver does not answer (the pass is retried)."""
    try:
        return read(name, namespace)
    except urllib3.exceptions.HTTPError as exc:
        raise Unreachable(f"the apiserver did not answer: {exc}") from exc
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise ReadFailed(refusal_message(exc)) from exc

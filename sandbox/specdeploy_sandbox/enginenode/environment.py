"""A container's environment and argv, resolved the way kubelet resolves them.

``envFrom`` first, then ``env`` in order; a value's ``$(VAR)`` refers to variables defined
before it, ``$$`` escapes a ``$``, and an undefined reference stays as written. ``command`` and
``args`` are expanded against the whole result. A missing Secret, ConfigMap or key that is not
``optional`` is a ConfigError, which the pod shows as CreateContainerConfigError.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

Kind = Literal["Secret", "ConfigMap"]
# (kind, namespace, name) -> the object's data (a Secret's decoded), or None when it does not exist.
Lookup = Callable[[Kind, str, str], Mapping[str, str] | None]

_LABEL_OR_ANNOTATION = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


class ConfigError(Exception):
    """The container's env refers to something missing; the message reads like kubelet's."""


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion (k8s.io/kubernetes third_party/forked/golang/expansion)."""
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "$" or i + 1 == len(text):
            out.append(char)
            i += 1
            continue
        following = text[i + 1]
        if following == "$":
            out.append("$")
            i += 2
        elif following == "(":
            end = text.find(")", i + 2)
            if end == -1:
                out.append("$(")
                i += 2
            else:
                name = text[i + 2 : end]
                out.append(env.get(name, f"$({name})"))
                i = end + 1
        else:
            out.append("$" + following)
            i += 2
    return "".join(out)


def field_ref(pod: Mapping[str, Any], path: str, pod_ip: str, host_ip: str) -> str:
    """The downward API value of ``path`` (fieldRef.fieldPath) for this pod."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    simple = {
        "metadata.name": metadata.get("name", ""),
        "metadata.namespace": metadata.get("namespace", ""),
        "metadata.uid": metadata.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
        "status.hostIP": host_ip,
        "status.hostIPs": host_ip,
    }
    if path in simple:
        return str(simple[path])
    match = _LABEL_OR_ANNOTATION.match(path)
    if match:
        return str((metadata.get(match.group(1)) or {}).get(match.group(2), ""))
    raise ConfigError(f"unsupported fieldRef fieldPath {path!r} on a sandbox engine node")


def _key_ref(kind: Kind, ref: Mapping[str, Any], namespace: str, lookup: Lookup) -> str | None:
    """The referenced key's value; None when missing but ``optional``."""
    name, key = ref.get("name", ""), ref.get("key", "")
    data = lookup(kind, namespace, name)
    if data is None:
        if ref.get("optional"):
            return None
        raise ConfigError(f'{kind.lower()} "{name}" not found')
    if key not in data:
        if ref.get("optional"):
            return None
        raise ConfigError(f"couldn't find key {key} in {kind} {namespace}/{name}")
    return data[key]


def _env_from(sources: Iterable[Mapping[str, Any]], namespace: str, lookup: Lookup) -> dict[str, str]:
    result: dict[str, str] = {}
    for source in sources:
        kind: Kind = "ConfigMap" if "configMapRef" in source else "Secret"
        ref = source.get("configMapRef") or source.get("secretRef") or {}
        data = lookup(kind, namespace, ref.get("name", ""))
        if data is None:
            if ref.get("optional"):
                continue
            raise ConfigError(f'{kind.lower()} "{ref.get("name", "")}" not found')
        prefix = source.get("prefix", "")
        result.update({f"{prefix}{key}": value for key, value in data.items()})
    return result


def container_env(
    pod: Mapping[str, Any], container: Mapping[str, Any], pod_ip: str, host_ip: str, lookup: Lookup
) -> dict[str, str]:
    """The variables the container spec defines (``envFrom`` then ``env``), expanded in order."""
    namespace = (pod.get("metadata") or {}).get("namespace", "")
    env = _env_from(container.get("envFrom") or [], namespace, lookup)
    for var in container.get("env") or []:
        name = var["name"]
        source = var.get("valueFrom")
        if source is None:
            env[name] = expand(var.get("value", ""), env)
            continue
        value: str | None
        if "fieldRef" in source:
            value = field_ref(pod, source["fieldRef"]["fieldPath"], pod_ip, host_ip)
        elif "secretKeyRef" in source:
            value = _key_ref("Secret", source["secretKeyRef"], namespace, lookup)
        elif "configMapKeyRef" in source:
            value = _key_ref("ConfigMap", source["configMapKeyRef"], namespace, lookup)
        else:
            raise ConfigError(f"env {name}: {sorted(source)} is not supported on a sandbox engine node")
        if value is not None:
            env[name] = value
    return env


def container_argv(
    container: Mapping[str, Any], env: Mapping[str, str], entrypoint: Sequence[str] = ()
) -> list[str]:
    """``command`` (else the image map's ``entrypoint``) + ``args``, expanded; ConfigError when
    neither gives a program, since the image's own entrypoint is unknown here."""
    args = [expand(token, env) for token in container.get("args") or []]
    command = [expand(token, env) for token in container.get("command") or []]
    if command:
        return [*command, *args]
    if entrypoint:
        return [*entrypoint, *args]
    raise ConfigError(
        f'container "{container.get("name")}" has no command: engine nodes do not know the '
        f'entrypoint of image "{container.get("image")}"; set the container\'s command'
    )

"""``spec.podTemplate`` merged over the engine pods' template, the way a strategic-merge patch
merges (``kubectl patch --type strategic``), for the PodSpec lists a platform patches.

Maps merge key by key, the patch's scalars and unlisted lists replace the template's. The lists
in ``POD_LISTS`` merge entry by entry on their merge key (core/v1's ``patchMergeKey``): an entry
with a key the template has is merged into it, any other is appended. Two choices differ from a
plain strategic merge, both to keep the operator's parts of the pod:

- an env var or a volume given again is replaced by the patch's, not merged with it (what
  ``kubectl apply`` sends with ``$retainKeys``): ``valueFrom`` replaces a ``value``, a
  ``persistentVolumeClaim`` an ``emptyDir``;
- tolerations are added to the template's (core/v1 replaces the whole list, which would drop the
  GPU taint's toleration the plan needs).

Patch directives (``$patch``, ``$retainKeys``, ``$setElementOrder``) are not read.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Keyed:
    """A list merged entry by entry on ``key``; ``replace``: a matching entry is replaced whole;
    ``lists``: the lists inside an entry that merge the same way."""

    key: str
    replace: bool = False
    lists: Mapping[str, Keyed | Union] = field(default_factory=dict)


@dataclass(frozen=True)
class Union:
    """A list the patch adds its entries to (an entry the template has already is not repeated)."""


CONTAINER_LISTS: Mapping[str, Keyed | Union] = {
    "env": Keyed("name", replace=True),
    "volumeMounts": Keyed("mountPath"),
    "volumeDevices": Keyed("devicePath"),
    "ports": Keyed("containerPort"),
}
POD_LISTS: Mapping[str, Keyed | Union] = {
    "containers": Keyed("name", lists=CONTAINER_LISTS),
    "initContainers": Keyed("name", lists=CONTAINER_LISTS),
    "volumes": Keyed("name", replace=True),
    "imagePullSecrets": Keyed("name"),
    "hostAliases": Keyed("ip"),
    "topologySpreadConstraints": Keyed("topologyKey"),
    "resourceClaims": Keyed("name", replace=True),
    "schedulingGates": Keyed("name"),
    "tolerations": Union(),
}


def merge(
    base: Mapping[str, Any], patch: Mapping[str, Any], lists: Mapping[str, Keyed | Union]
) -> dict[str, Any]:
    """``patch`` merged over ``base`` (neither is changed); ``lists`` says how the lists at this
    level merge."""
    merged = copy.deepcopy(dict(base))
    for name, value in patch.items():
        current = merged.get(name)
        rule = lists.get(name)
        if isinstance(value, Mapping) and isinstance(current, Mapping):
            merged[name] = merge(current, value, {})
        elif rule is not None and isinstance(value, list) and isinstance(current, list):
            merged[name] = _merge_list(current, value, rule)
        else:
            merged[name] = copy.deepcopy(value)
    return merged


def _merge_list(base: list[Any], patch: list[Any], rule: Keyed | Union) -> list[Any]:
    merged = list(base)
    if isinstance(rule, Union):
        merged.extend(copy.deepcopy(entry) for entry in patch if entry not in base)
        return merged
    where = {entry.get(rule.key): i for i, entry in enumerate(merged) if isinstance(entry, Mapping)}
    for entry in patch:
        i = where.get(entry.get(rule.key)) if isinstance(entry, Mapping) else None
        if i is None:
            merged.append(copy.deepcopy(entry))
        elif rule.replace:
            merged[i] = copy.deepcopy(entry)
        else:
            merged[i] = merge(merged[i], entry, rule.lists)
    return merged


def patch_pod_template(template: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """A pod template (``metadata``, ``spec``) with ``spec.podTemplate`` merged over it."""
    return {
        "metadata": merge(template.get("metadata") or {}, patch.get("metadata") or {}, {}),
        "spec": merge(template.get("spec") or {}, patch.get("spec") or {}, POD_LISTS),
    }

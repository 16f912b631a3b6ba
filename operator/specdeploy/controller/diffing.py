"""Deciding whether a child needs a write: the basis of zero-write reconciles.

Server-side apply of an unchanged object still costs a PATCH per child per event. Instead the
operator stamps each child with a hash of what it applied and compares: a different hash means
the spec changed (including removed fields); a hash match whose fields no longer hold means
someone edited the child, and the apply repairs it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from specdeploy.api import GROUP

HASH_ANNOTATION = f"{GROUP}/applied-hash"


def manifest_hash(manifest: dict[str, Any]) -> str:
    payload = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(payload).hexdigest()[:16]


def stamped(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest with its own hash in an annotation (the hash excludes that annotation).

    A manifest that already carries one is returned as is: a pass stamps its children once and
    both the write decision and the status's rollout check read that stamp (hashing a Deployment
    costs about as much as the rest of the comparison)."""
    if HASH_ANNOTATION in (manifest["metadata"].get("annotations") or {}):
        return manifest
    meta = dict(manifest["metadata"])
    meta["annotations"] = {**meta.get("annotations", {}), HASH_ANNOTATION: manifest_hash(manifest)}
    return {**manifest, "metadata": meta}


def is_subset(desired: Any, current: Any) -> bool:
    """Every value the operator sets is present in ``current``; extra defaulted fields are fine."""
    if isinstance(desired, dict):
        # The apiserver drops empty lists, so an absent key matches a desired [].
        return isinstance(current, dict) and all(
            is_subset(value, current[key]) if key in current else value == []
            for key, value in desired.items()
        )
    if isinstance(desired, list):
        return (
            isinstance(current, list)
            and len(desired) == len(current)
            and all(is_subset(d, c) for d, c in zip(desired, current, strict=True))
        )
    return bool(desired == current)


def needs_apply(desired_stamped: dict[str, Any], current: dict[str, Any] | None) -> bool:
    if current is None:
        return True
    want = desired_stamped["metadata"]["annotations"][HASH_ANNOTATION]
    have = (current.get("metadata", {}).get("annotations") or {}).get(HASH_ANNOTATION)
    if want != have:
        return True
    meta, current_meta = desired_stamped["metadata"], current.get("metadata", {})
    current_refs = current_meta.get("ownerReferences") or []
    return not (
        is_subset(desired_stamped.get("spec", {}), current.get("spec", {}))
        and is_subset(meta.get("labels", {}), current_meta.get("labels", {}))
        # Someone else's extra reference is theirs to keep; a removed one of ours is drift.
        and all(any(is_subset(ref, have) for have in current_refs) for ref in meta.get("ownerReferences", []))
    )


def status_fingerprint(status: dict[str, Any]) -> str:
    """The identity of a status, or of the status a merge patch leaves (its removals, None, are
    left out), ignoring transition times (a re-computed patch gets new ones): a patch and the
    stored status it wrote have the same."""
    conds = [
        {k: v for k, v in c.items() if k != "lastTransitionTime"} for c in status.get("conditions") or []
    ]
    return manifest_hash({**{k: v for k, v in status.items() if v is not None}, "conditions": conds})


def metadata_fingerprint(body: dict[str, Any]) -> str:
    """The identity of what a reconcile reads of a resource's metadata (its uid and generation),
    and of what a person may change to ask for a pass (labels, annotations), or a deletion."""
    meta = body.get("metadata") or {}
    read = ("uid", "generation", "labels", "annotations", "deletionTimestamp")
    return manifest_hash({k: meta.get(k) for k in read})

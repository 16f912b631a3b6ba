"""Status conditions: merging with what is stored so transition times only move on change."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from specdeploy.api import CONDITION_ORDER, TIME_FORMAT, Condition


@dataclass(frozen=True)
class Transition:
    """A condition that appeared or whose status or reason changed; may become a Kubernetes Event."""

    type: str
    status: str
    reason: str
    message: str
    appeared: bool = False


def now() -> str:
    return datetime.now(UTC).strftime(TIME_FORMAT)


def merge(
    current: Iterable[dict[str, Any]], desired: Iterable[Condition], generation: int | None
) -> tuple[list[dict[str, Any]], list[Transition]]:
    """Desired conditions as stored dicts, keeping lastTransitionTime where status is unchanged."""
    stored = {c.get("type"): c for c in current}
    merged: list[dict[str, Any]] = []
    transitions: list[Transition] = []

    def rank(c: Condition) -> int:
        return CONDITION_ORDER.index(c.type) if c.type in CONDITION_ORDER else len(CONDITION_ORDER)

    for cond in sorted(desired, key=rank):
        previous = stored.get(cond.type)
        changed = previous is None or previous.get("status") != cond.status
        when = now() if changed or previous is None else previous.get("lastTransitionTime") or now()
        merged.append(
            cond.model_copy(
                update={"last_transition_time": when, "observed_generation": generation}
            ).model_dump(by_alias=True, exclude_none=True)
        )
        if previous is None or changed or previous.get("reason") != cond.reason:
            transitions.append(
                Transition(cond.type, cond.status, cond.reason, cond.message, appeared=previous is None)
            )
    return merged, transitions


def same(current: Iterable[dict[str, Any]], merged: Iterable[dict[str, Any]]) -> bool:
    """Equal ignoring transition times, so an unchanged status is not rewritten."""

    def strip(conds: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in conds]

    return strip(current) == strip(merged)

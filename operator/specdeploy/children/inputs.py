"""What a child builder is given: one value for every kind, so the table of kinds can call any
builder the same way (and a new builder can take it directly)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specdeploy import api
from specdeploy.children.defaults import NO_DEFAULTS, PodDefaults
from specdeploy.engines import EngineLaunch
from specdeploy.planning import Placement


@dataclass(frozen=True)
class ChildInputs:
    """Everything a builder may read: the effective spec and what the pipeline settled for it."""

    name: str
    namespace: str
    spec: api.SpeculativeDeploymentSpec
    launch: EngineLaunch
    placement: Placement
    plan: api.Plan
    owner: dict[str, Any] | None
    defaults: PodDefaults = NO_DEFAULTS

    @property
    def multi_node(self) -> bool:
        return self.plan.nodes_per_replica > 1

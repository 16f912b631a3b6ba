"""GPU planning: the GPU products a cluster has, the memory a replica needs, the plan that fits.

gpus (product table, node labels) -> inventory (what the cluster offers) -> shape and memory
(what a replica needs) -> parallelism (what the engines can shard) -> planner (the choice).
"""

from specdeploy.planning.inventory import GpuInventoryError, Inventory, inventory_from_nodes, parse_gpus_flag
from specdeploy.planning.memory import MemoryEstimate, estimate_memory
from specdeploy.planning.parallelism import tensor_parallel_violations
from specdeploy.planning.planner import (
    DEFAULT_MAX_MODEL_LEN,
    Alternative,
    Placement,
    PlanOutcome,
    Reason,
    placement,
    plan,
)
from specdeploy.planning.shape import (
    IncompleteConfigError,
    ModelShape,
    draft_parameter_count,
    model_context_limit,
    model_shape,
    parameter_count,
)

__all__ = [
    "DEFAULT_MAX_MODEL_LEN",
    "Alternative",
    "GpuInventoryError",
    "IncompleteConfigError",
    "Inventory",
    "MemoryEstimate",
    "ModelShape",
    "Placement",
    "PlanOutcome",
    "Reason",
    "draft_parameter_count",
    "estimate_memory",
    "inventory_from_nodes",
    "model_context_limit",
    "model_shape",
    "parameter_count",
    "parse_gpus_flag",
    "placement",
    "plan",
    "tensor_parallel_violations",
]

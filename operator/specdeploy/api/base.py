"""The API's identity and the base of every model: group, version, names, limits, wire conventions."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, StringConstraints
from pydantic.alias_generators import to_camel

GROUP = "specdeploy.io"
VERSION = "v1alpha1"
KIND = "SpeculativeDeployment"
PLURAL = "speculativedeployments"
SINGULAR = "speculativedeployment"
SHORT_NAMES = ("sdep", "specdeploy")
API_VERSION = f"{GROUP}/{VERSION}"

EngineName = Literal["vllm", "sglang"]
# The extended resource NVIDIA's device plugin advertises; the plan sets it, users may not.
GPU_RESOURCE = "nvidia.com/gpu"
# The most nodes one replica spans (a LeaderWorkerSet group of this size).
MAX_NODES = 8
# The engine's HOME, an emptyDir of its own: the engine images' /root is mode 700, so a non-root
# engine keeps its caches (torch compile, Triton, the hub) here instead.
ENGINE_HOME = "/home/engine"
# The apiserver's grammar of a resource quantity (<signedNumber><suffix>, an integer exponent
# of at most two digits): a value it cannot parse fails the whole Deployment write with an HTTP
# 500, so the schema refuses it first.
QUANTITY_PATTERN = r"^[+-]?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?[0-9]{1,2}))?$"
Quantity = Annotated[str, StringConstraints(pattern=QUANTITY_PATTERN, max_length=64)]


class ApiModel(BaseModel):
    """camelCase on the wire, snake_case in Python, immutable once parsed."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True, extra="forbid")

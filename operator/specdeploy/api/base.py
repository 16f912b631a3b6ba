"""The API's identity and the base of every model: group, version, names, wire conventions."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict

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


def cel(rule: str, message: str, field_path: str | None = None) -> JsonDict:
    """One x-kubernetes-validations entry; fieldPath makes the apiserver name the field."""
    entry: JsonDict = {"rule": rule, "message": message}
    if field_path:
        entry["fieldPath"] = field_path
    return entry


class ApiModel(BaseModel):
    """camelCase on the wire, snake_case in Python, immutable once parsed."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True, extra="forbid")

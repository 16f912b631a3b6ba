"""The API's identity and the base of every model: group, version, names, limits, wire conventions."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, StringConstraints, WithJsonSchema
from pydantic.alias_generators import to_camel

GROUP = "specdeploy.io"
VERSION = "v1alpha1"
KIND = "SpeculativeDeployment"
PLURAL = "speculativedeployments"
SINGULAR = "speculativedeployment"
SHORT_NAMES = ("sdep", "specdeploy")
API_VERSION = f"{GROUP}/{VERSION}"

EngineName = Literal["vllm", "sglang"]
# The latest ``specdeploy bench`` run, kept on the resource; with ``--tokens`` it holds the cost
# of each draft length that adaptive speculation reads.
BENCHMARK_ANNOTATION = f"{GROUP}/benchmark"
# Set by ``specdeploy bench`` while it measures the resource, to the time its run expires:
# adaptive speculation changes nothing that runs until then, so no rollout lands mid-measurement.
BENCHMARK_RUNNING_ANNOTATION = f"{GROUP}/benchmark-running"
# How the API writes a time (RFC 3339, UTC, whole seconds): status, Events, annotations.
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
# The extended resource NVIDIA's device plugin advertises; the plan sets it, users may not.
GPU_RESOURCE = "nvidia.com/gpu"
# The most nodes one replica spans (a LeaderWorkerSet group of this size).
MAX_NODES = 8
# The most replicas (engine pods, or LeaderWorkerSet groups) one resource asks for.
MAX_REPLICAS = 1024
# The largest batch size a draft-length schedule names; the last range runs on above it too.
MAX_BATCH_SIZE = 65_536
# The most draft tokens per step (vLLM num_speculative_tokens, SGLang steps).
MAX_SPECULATIVE_TOKENS = 16
# The longest resource name every child can take. The Service takes the name itself, so it is a
# DNS-1035 label (at most 63). A replica on several nodes is LeaderWorkerSet group i, whose
# workers are a StatefulSet named <name>-<i>; a StatefulSet's pods carry the label
# controller-revision-hash: <statefulset>-<hash>, the hash up to 10 characters, and a label value
# holds at most 63. With i up to MAX_REPLICAS - 1 that leaves 63 - 11 - 5 = 47 (and room for the
# names ``specdeploy bench`` derives, <name>-bench-load the longest, without shortening them).
LABEL_VALUE_MAX = 63
REVISION_HASH_SUFFIX = len("-") + 10
NAME_MAX_LENGTH = LABEL_VALUE_MAX - REVISION_HASH_SUFFIX - len(f"-{MAX_REPLICAS - 1}")
DNS_1035_LABEL_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
# The engine's HOME, an emptyDir of its own: the engine images' /root is mode 700, so a non-root
# engine keeps its caches (torch compile, Triton, the hub) here instead.
ENGINE_HOME = "/home/engine"
# The apiserver's grammar of a resource quantity (<signedNumber><suffix>, an integer exponent
# of at most two digits): a value it cannot parse fails the whole Deployment write with an HTTP
# 500, so the schema refuses it first.
QUANTITY_PATTERN = r"^[+-]?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?[0-9]{1,2}))?$"
QUANTITY_MAX_LENGTH = 64


def _quantity_text(value: Any) -> Any:
    """A number as its quantity string (8 -> "8", 8.0 -> "8", 0.5 -> "0.5"), so children and
    their diffs see one form whichever way the manifest wrote it; bool is no number."""
    if type(value) is int:
        return str(value)
    if type(value) is float:
        return str(int(value)) if value.is_integer() else repr(value)
    return value


# Int-or-string, as core/v1 takes a quantity (``cpu: 8`` or ``memory: 64Gi``); the CRD cannot
# say number-or-string, so a fraction reaches the apiserver as a string ("0.5", 500m), while
# files read offline (``render``, ``plan``) may also write it as a YAML float.
Quantity = Annotated[
    str,
    BeforeValidator(_quantity_text),
    StringConstraints(pattern=QUANTITY_PATTERN, max_length=QUANTITY_MAX_LENGTH),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "maxLength": QUANTITY_MAX_LENGTH,
            "x-kubernetes-int-or-string": True,
        }
    ),
]


class ApiModel(BaseModel):
    """camelCase on the wire, snake_case in Python, immutable once parsed."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True, extra="forbid")

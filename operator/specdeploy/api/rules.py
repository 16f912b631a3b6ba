"""Every CEL rule of the CRD, written once: expression, message, place in the schema, and the
same rule as one Python predicate.

The models put the rules attached to them into their schema (``schema_extra``), so the CRD's
``x-kubernetes-validations`` come from this table. The rules marked ``offline`` are also checked
on parse (``enforce``), for specs that never went through the apiserver (``specdeploy render``,
``plan``); the SGLang engine reads its draft-shape rules from here. A predicate sees what CEL
sees as ``self``: the wire form (camelCase keys, unset fields absent) of the object or field
the rule is attached to. The unit tests evaluate both sides with a real CEL implementation.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic.config import JsonDict

from specdeploy.api.base import (
    DNS_1035_LABEL_PATTERN,
    ENGINE_HOME,
    GPU_RESOURCE,
    MAX_NODES,
    NAME_MAX_LENGTH,
    ApiModel,
)
from specdeploy.api.engine_pod import ENGINE_CONTAINER, OPERATOR_LABELS, OWN_PREFIX

# The ``at`` of the rules on the object itself, which see its metadata.name (the only metadata
# field CEL sees there besides generateName; no fieldPath can point into metadata, so such a
# rule's message names the field).
OBJECT = ""

# The tensor-parallel sizes the apiserver accepts.
TENSOR_SIZES = (1, 2, 4, 8, 16, 32, 64)
ROOT_CACHE_MESSAGE = (
    "a non-root engine cannot reach a cache under /root (the images' /root is mode 700): mount it "
    f"elsewhere (default {ENGINE_HOME}/.cache/huggingface) or set security.runAsNonRoot: false"
)


@dataclass(frozen=True)
class Rule:
    """One validation rule: the CEL the apiserver runs and the predicate Python runs."""

    at: str
    """The schema node the rule is attached to, which CEL sees as ``self`` (``spec.engine``;
    ``OBJECT`` for the object itself)."""
    cel: str
    message: str
    holds: Callable[[Any], bool]
    """True where the CEL expression is true, for the same ``self`` in wire form."""
    field_path: str | None = None
    """The field the apiserver names on a violation, relative to ``self`` (``.sglang``)."""
    offline: bool = False
    """Also checked when a spec is parsed: the apiserver does not see every spec."""

    def entry(self) -> JsonDict:
        """The ``x-kubernetes-validations`` entry."""
        entry: JsonDict = {"rule": self.cel, "message": self.message}
        if self.field_path:
            entry["fieldPath"] = self.field_path
        return entry

    def error(self) -> str:
        """The message, after the field it names (as kubectl shows it) unless it starts with it."""
        field = (self.field_path or "").lstrip(".")
        return f"{field}: {self.message}" if field and not self.message.startswith(field) else self.message


def _auto_or_node_count(field: str) -> Rule:
    return Rule(
        at=f"spec.parallelism.{field}",
        cel=f"type(self) == string ? self == 'auto' : self >= 1 && self <= {MAX_NODES}",
        message=f"parallelism.{field} must be auto or 1 to {MAX_NODES}",
        holds=lambda v: v == "auto" if type(v) is str else type(v) is int and 1 <= v <= MAX_NODES,
        offline=True,
    )


def _cache_reachable(spec: Any) -> bool:
    path = spec.get("modelCache", {}).get("mountPath")
    return (
        not spec.get("security", {}).get("runAsNonRoot", False)
        or path is None
        or not (path == "/root" or path.startswith("/root/"))
    )


# With top-k 1 the draft is a chain of steps + 1 tokens (SGLang overrides any other count).
SGLANG_CHAIN = Rule(
    at="spec.engine.sglang",
    cel=(
        "!has(self.eagleTopk) || self.eagleTopk != 1 || !has(self.numDraftTokens) "
        "|| !has(self.numSteps) || self.numDraftTokens == self.numSteps + 1"
    ),
    message="with eagleTopk 1, numDraftTokens must equal numSteps + 1",
    holds=lambda o: (
        o.get("eagleTopk") != 1
        or "numDraftTokens" not in o
        or "numSteps" not in o
        or o["numDraftTokens"] == o["numSteps"] + 1
    ),
    field_path=".numDraftTokens",
)
# SGLang fails at startup on one of the two without the other.
SGLANG_TOPK_WITH_DRAFT_TOKENS = Rule(
    at="spec.engine.sglang",
    cel="has(self.eagleTopk) == has(self.numDraftTokens)",
    message="eagleTopk and numDraftTokens are set together (or both left to the engine)",
    holds=lambda o: ("eagleTopk" in o) == ("numDraftTokens" in o),
    field_path=".eagleTopk",
)


def _covers_every_batch(speculator: Any) -> bool:
    """The ranges partition 1, 2, ...: one starts at 1, each other right after another's end,
    each end is followed by a start, starts are unique and one range alone is open-ended."""
    ranges = speculator.get("schedule")
    if ranges is None:
        return True
    starts = [r["fromBatch"] for r in ranges]
    ends = {r["toBatch"] for r in ranges if "toBatch" in r}
    return (
        starts.count(1) == 1
        and sum("toBatch" not in r for r in ranges) == 1
        and len(set(starts)) == len(starts)
        and all(start == 1 or start - 1 in ends for start in starts)
        and all(end + 1 in starts for end in ends)
    )


# vLLM's own rules for num_speculative_tokens_per_batch_size (its first range starts at 1, none
# overlap), made stricter where a schedule with a gap or an end is surely a mistake: vLLM
# carries the previous draft length over a gap and past the last range.
SCHEDULE_COVERS = Rule(
    at="spec.speculator",
    cel=(
        "!has(self.schedule) || ("
        "self.schedule.exists_one(r, r.fromBatch == 1) && "
        "self.schedule.exists_one(r, !has(r.toBatch)) && "
        "self.schedule.all(r, self.schedule.exists_one(o, o.fromBatch == r.fromBatch)) && "
        "self.schedule.all(r, r.fromBatch == 1 || "
        "self.schedule.exists(o, has(o.toBatch) && o.toBatch + 1 == r.fromBatch)) && "
        "self.schedule.all(r, !has(r.toBatch) || "
        "self.schedule.exists(o, o.fromBatch == r.toBatch + 1)))"
    ),
    message=(
        "schedule must cover every batch size once: the first range from fromBatch 1, "
        "each next from the previous toBatch + 1, and only the last without toBatch (and above)"
    ),
    holds=_covers_every_batch,
    field_path=".schedule",
    offline=True,
)
SCHEDULE_TOKENS = Rule(
    at="spec.speculator",
    cel=(
        "!has(self.schedule) || !has(self.numSpeculativeTokens) || "
        "self.schedule.all(r, r.tokens <= self.numSpeculativeTokens)"
    ),
    message="schedule tokens must be at most numSpeculativeTokens, the draft length the engine allocates for",
    holds=lambda s: (
        "schedule" not in s
        or "numSpeculativeTokens" not in s
        or all(r["tokens"] <= s["numSpeculativeTokens"] for r in s["schedule"])
    ),
    field_path=".schedule",
    offline=True,
)
SCHEDULE_RANGE = Rule(
    at="spec.speculator.schedule[]",
    cel="!has(self.toBatch) || self.toBatch >= self.fromBatch",
    message="toBatch must be at least fromBatch",
    holds=lambda r: "toBatch" not in r or r["toBatch"] >= r["fromBatch"],
    field_path=".toBatch",
    offline=True,
)


# The engine container's fields the operator sets, each with where its setting lives instead.
ENGINE_OWNED = {
    "command": "rendered from the engine and the GPU plan (status.command); extra arguments go "
    "in spec.engine.args",
    "args": "extra arguments go in spec.engine.args",
    "image": "set it in spec.engine.image",
    "resources": "set cpu, memory and other resources in spec.resources; GPUs come from the plan",
    "ports": "the engine serves its API and /metrics on the one port the Service targets",
    "startupProbe": "the startup budget is spec.lifecycle.startupTimeoutSeconds",
    "readinessProbe": "the engine's renderer sets it",
    "livenessProbe": "the engine's renderer sets it",
}
TEMPLATE_CONTAINER = "spec.podTemplate.spec.containers[]"


def _engine_owned(field: str, hint: str) -> Rule:
    return Rule(
        at=TEMPLATE_CONTAINER,
        cel=f"self.name != '{ENGINE_CONTAINER}' || !has(self.{field})",
        message=f"{field} of the {ENGINE_CONTAINER} container is the operator's: {hint}",
        holds=lambda c: c.get("name") != ENGINE_CONTAINER or field not in c,
        field_path=f".{field}",
        offline=True,
    )


def _gpu(key: str) -> bool:
    """A GPU resource name: NVIDIA's (nvidia.com/gpu, MIG slices) or another vendor's <domain>/gpu."""
    return key.startswith("nvidia.com/") or key.endswith("/gpu")


def _no_sidecar_gpus(container: Any) -> bool:
    resources = container.get("resources", {})
    return container.get("name") == ENGINE_CONTAINER or not any(
        _gpu(key) for part in ("requests", "limits") for key in resources.get(part, {})
    )


def _own_label(key: str) -> bool:
    return key in OPERATOR_LABELS or key.startswith(OWN_PREFIX)


_GPU_CEL = "!(k.startsWith('nvidia.com/') || k.endsWith('/gpu'))"
_OWN_LABELS_CEL = ", ".join(f"'{label}'" for label in OPERATOR_LABELS)


def _name_fits(obj: Any) -> bool:
    """A file read offline may leave the name out; the apiserver always has one."""
    name = obj.get("metadata", {}).get("name")
    if name is None:
        return True
    return len(name) <= NAME_MAX_LENGTH and re.fullmatch(DNS_1035_LABEL_PATTERN, name) is not None


# The children are named after the resource (base.NAME_MAX_LENGTH says why this length): a name
# they cannot take would start GPU pods and then fail on the Service.
NAME = Rule(
    at=OBJECT,
    cel=(
        f"size(self.metadata.name) <= {NAME_MAX_LENGTH} && "
        f"self.metadata.name.matches('{DNS_1035_LABEL_PATTERN}')"
    ),
    message=(
        f"metadata.name must be a DNS-1035 label of at most {NAME_MAX_LENGTH} characters (lowercase "
        "letters, digits and '-', starting with a letter and ending with a letter or digit): the "
        "Service and the StatefulSets of a multi-node replica are named after it"
    ),
    holds=_name_fits,
    offline=True,
)

RULES: tuple[Rule, ...] = (
    NAME,
    SCHEDULE_COVERS,
    SCHEDULE_TOKENS,
    SCHEDULE_RANGE,
    SGLANG_CHAIN,
    SGLANG_TOPK_WITH_DRAFT_TOKENS,
    Rule(
        at="spec.engine",
        cel="!has(self.sglang) || self.name == 'sglang'",
        message="engine.sglang is only valid with engine.name sglang",
        holds=lambda e: "sglang" not in e or e.get("name") == "sglang",
        field_path=".sglang",
    ),
    Rule(
        at="spec.engine",
        cel="!has(self.vllm) || self.name == 'vllm'",
        message="engine.vllm is only valid with engine.name vllm",
        holds=lambda e: "vllm" not in e or e.get("name") == "vllm",
        field_path=".vllm",
    ),
    # Not offline: without the apiserver any positive size reaches the planner, which says why
    # it does not shard (Parallelism checks that much).
    Rule(
        at="spec.parallelism.tensor",
        cel=f"type(self) == string ? self == 'auto' : self in [{', '.join(map(str, TENSOR_SIZES))}]",
        message=f"parallelism.tensor must be auto or one of {', '.join(map(str, TENSOR_SIZES))}",
        holds=lambda v: v == "auto" if type(v) is str else type(v) is int and v in TENSOR_SIZES,
    ),
    _auto_or_node_count("nodes"),
    _auto_or_node_count("pipeline"),
    Rule(
        at="spec.modelCache",
        cel="!(has(self.claimName) && has(self.sizeLimit))",
        message="modelCache takes claimName or sizeLimit, not both",
        holds=lambda c: not ("claimName" in c and "sizeLimit" in c),
        field_path=".claimName",
    ),
    Rule(
        at="spec.resources",
        cel=(
            f"(!has(self.requests) || !('{GPU_RESOURCE}' in self.requests)) && "
            f"(!has(self.limits) || !('{GPU_RESOURCE}' in self.limits))"
        ),
        message=f"{GPU_RESOURCE} is set from the tensor-parallel plan; use parallelism.tensor",
        holds=lambda r: GPU_RESOURCE not in r.get("requests", {}) and GPU_RESOURCE not in r.get("limits", {}),
    ),
    Rule(
        at="spec.lifecycle",
        # has(): the apiserver checks the rule on the field's default ({}) as it is.
        cel=(
            "!has(self.preStopSleepSeconds) || !has(self.terminationGracePeriodSeconds) || "
            "self.preStopSleepSeconds < self.terminationGracePeriodSeconds"
        ),
        message="preStopSleepSeconds must be less than terminationGracePeriodSeconds",
        holds=lambda lc: (
            "preStopSleepSeconds" not in lc
            or "terminationGracePeriodSeconds" not in lc
            or lc["preStopSleepSeconds"] < lc["terminationGracePeriodSeconds"]
        ),
        field_path=".preStopSleepSeconds",
        offline=True,
    ),
    Rule(
        at="spec",
        cel="has(self.verifier) || (has(self.speculator) && has(self.speculator.model))",
        message="spec.verifier is required unless spec.speculator.model names a speculator "
        "that declares its verifier",
        holds=lambda s: "verifier" in s or "model" in s.get("speculator", {}),
        field_path=".verifier",
    ),
    Rule(
        at="spec",
        cel=(
            "!has(self.security) || !has(self.security.runAsNonRoot) || "
            "!self.security.runAsNonRoot || !has(self.modelCache) || "
            "!has(self.modelCache.mountPath) || !(self.modelCache.mountPath == '/root' || "
            "self.modelCache.mountPath.startsWith('/root/'))"
        ),
        message=ROOT_CACHE_MESSAGE,
        holds=_cache_reachable,
        field_path=".modelCache.mountPath",
        offline=True,
    ),
    *(_engine_owned(field, hint) for field, hint in ENGINE_OWNED.items()),
    Rule(
        at=TEMPLATE_CONTAINER,
        cel=(
            f"self.name == '{ENGINE_CONTAINER}' || !has(self.resources) || "
            f"((!has(self.resources.requests) || self.resources.requests.all(k, {_GPU_CEL})) && "
            f"(!has(self.resources.limits) || self.resources.limits.all(k, {_GPU_CEL})))"
        ),
        message="GPUs (nvidia.com/*, */gpu) are planned for the engine container only, not a sidecar",
        holds=_no_sidecar_gpus,
        field_path=".resources",
        offline=True,
    ),
    Rule(
        at="spec.podTemplate.spec",
        cel="!has(self.affinity)",
        message="podTemplate.spec.affinity is refused: set spec.scheduling.affinity, which the "
        "operator merges with the GPU plan's node affinity",
        holds=lambda s: "affinity" not in s,
        field_path=".affinity",
        offline=True,
    ),
    Rule(
        at="spec.podTemplate.metadata",
        cel=(
            f"!has(self.labels) || self.labels.all(k, !(k in [{_OWN_LABELS_CEL}]) && "
            f"!k.startsWith('{OWN_PREFIX}'))"
        ),
        message=f"{', '.join(OPERATOR_LABELS)} and {OWN_PREFIX}* are the operator's labels (the "
        "Service and the watches select engine pods by them)",
        holds=lambda m: not any(_own_label(key) for key in m.get("labels", {})),
        field_path=".labels",
        offline=True,
    ),
)


def attached(at: str) -> tuple[Rule, ...]:
    """The rules attached to one schema node, in table order."""
    return tuple(rule for rule in RULES if rule.at == at)


def schema_extra(at: str) -> JsonDict:
    """The ``x-kubernetes-validations`` of one schema node, for its model or field."""
    return {"x-kubernetes-validations": [rule.entry() for rule in attached(at)]}


def wire(model: ApiModel) -> dict[str, Any]:
    """A parsed object as CEL sees it once the apiserver has defaulted it: camelCase, no nulls."""
    return model.model_dump(by_alias=True, exclude_none=True)


def enforce(at: str, value: Any) -> None:
    """Raise the first offline rule of one schema node that ``value`` (in wire form) breaks."""
    for rule in attached(at):
        if rule.offline and not rule.holds(value):
            raise ValueError(rule.error())

"""``spec.podTemplate``: a patch over the engine pods' template, for what the typed fields do not
cover (image pull secrets, a service account, extra volumes and mounts, ``envFrom``, env vars from
Secrets, sidecars).

It is free-form core/v1 PodTemplateSpec (metadata labels and annotations, any PodSpec field),
merged over the template the operator builds the way a strategic-merge patch merges
(``children.podpatch``). Only the fields the rules in ``api.rules`` read are declared here: the
operator's own parts of the pod (the engine container's command, arguments, image, resources,
port and probes; the GPU node affinity; the labels it selects the pods by) are refused at apply,
each with the field named.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import ConfigDict, Field, model_validator
from pydantic.config import JsonDict

from specdeploy.api import rules
from specdeploy.api.base import ApiModel

# An int-or-string quantity (cpu: 1, memory: 1Gi): only its resource name is checked here.
IntOrString = Annotated[int | str, Field(json_schema_extra={"x-kubernetes-int-or-string": True})]
MAX_CONTAINERS = 16
MAX_LABELS = 64
MAX_RESOURCES = 16


def _open(at: str) -> JsonDict:
    """A node that keeps the fields it does not declare (any core/v1 field), with its rules."""
    return {"x-kubernetes-preserve-unknown-fields": True, **rules.schema_extra(at)}


class TemplateMetadata(ApiModel):
    """Labels and annotations added to the engine pods."""

    model_config = ConfigDict(json_schema_extra=rules.schema_extra("spec.podTemplate.metadata"))

    labels: dict[str, Annotated[str, Field(max_length=63)]] = Field(
        default_factory=dict,
        max_length=MAX_LABELS,
        description="Pod labels; the app.kubernetes.io/ name, instance, managed-by and component "
        "labels and the specdeploy.io/ ones are the operator's.",
    )
    annotations: dict[str, str] = Field(default_factory=dict, description="Pod annotations.")

    @model_validator(mode="after")
    def _not_the_operators(self) -> TemplateMetadata:
        """The CEL rule, for specs that did not come through the apiserver (``render``, ``plan``)."""
        rules.enforce("spec.podTemplate.metadata", rules.wire(self))
        return self


class TemplateResources(ApiModel):
    """A sidecar's resources: anything but GPUs, which the plan gives the engine container."""

    model_config = ConfigDict(extra="allow", json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})

    requests: dict[str, IntOrString] = Field(
        default_factory=dict, max_length=MAX_RESOURCES, description="Requests by resource name."
    )
    limits: dict[str, IntOrString] = Field(
        default_factory=dict, max_length=MAX_RESOURCES, description="Limits by resource name."
    )


class TemplateContainer(ApiModel):
    """A core/v1 Container of the patch: the one named engine patches the engine container (its
    command, args, image, resources, ports and probes are the operator's), any other adds a sidecar."""

    model_config = ConfigDict(extra="allow", json_schema_extra=_open("spec.podTemplate.spec.containers[]"))

    name: str = Field(min_length=1, max_length=63, description="engine, or a sidecar's name.")
    image: str | None = Field(default=None, max_length=512, description="A sidecar's image.")
    command: list[str] | None = Field(default=None, description="A sidecar's command.")
    args: list[str] | None = Field(default=None, description="A sidecar's arguments.")
    ports: list[dict[str, Any]] | None = Field(default=None, description="A sidecar's ports.")
    resources: TemplateResources | None = Field(default=None, description="A sidecar's resources.")
    startup_probe: dict[str, Any] | None = Field(default=None, description="A sidecar's startup probe.")
    readiness_probe: dict[str, Any] | None = Field(default=None, description="A sidecar's readiness probe.")
    liveness_probe: dict[str, Any] | None = Field(default=None, description="A sidecar's liveness probe.")

    @model_validator(mode="after")
    def _not_the_operators(self) -> TemplateContainer:
        """The CEL rules, for specs that did not come through the apiserver (``render``, ``plan``)."""
        rules.enforce("spec.podTemplate.spec.containers[]", rules.wire(self))
        return self


class TemplatePodSpec(ApiModel):
    """Fields of core/v1 PodSpec merged over the engine pods' spec."""

    model_config = ConfigDict(extra="allow", json_schema_extra=_open("spec.podTemplate.spec"))

    containers: list[TemplateContainer] = Field(
        default_factory=list,
        max_length=MAX_CONTAINERS,
        description="Merged by name: engine patches the engine container (env, envFrom, "
        "volumeMounts, ...), other names are sidecars.",
    )
    affinity: dict[str, Any] | None = Field(
        default=None, description="Refused: spec.scheduling.affinity is merged with the GPU plan's."
    )

    @model_validator(mode="after")
    def _not_the_operators(self) -> TemplatePodSpec:
        """The CEL rules, for specs that did not come through the apiserver (``render``, ``plan``)."""
        rules.enforce("spec.podTemplate.spec", rules.wire(self))
        return self


class PodTemplate(ApiModel):
    """A patch over the engine pods' template, merged like a strategic-merge patch."""

    metadata: TemplateMetadata = Field(
        default_factory=TemplateMetadata, description="Pod labels and annotations."
    )
    spec: TemplatePodSpec = Field(default_factory=TemplatePodSpec, description="core/v1 PodSpec fields.")

    def patch(self) -> dict[str, Any]:
        """The patch in wire form: camelCase, the fields the user gave and no others."""
        return self.model_dump(by_alias=True, exclude_unset=True, exclude_none=True)

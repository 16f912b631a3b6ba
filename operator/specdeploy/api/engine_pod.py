"""What identifies an engine pod: the labels the operator sets and selects it by, and the name of
its engine container.

Written at the bottom of the package so that the API can refuse them in ``spec.podTemplate``
(``api.rules``) and the child builders can set them (``children``) from one place.
"""

from __future__ import annotations

from specdeploy.api.base import GROUP

NAME_LABEL = "app.kubernetes.io/name"
INSTANCE_LABEL = "app.kubernetes.io/instance"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
COMPONENT_LABEL = "app.kubernetes.io/component"
# The operator's own label domain (the engine, a multi-node pod's role, a benchmark's role).
OWN_PREFIX = f"{GROUP}/"
ENGINE_LABEL = f"{OWN_PREFIX}engine"
ENGINE_CONTAINER = "engine"
# The labels the Service, the Deployment's selector and the operator's watches rely on.
OPERATOR_LABELS = (NAME_LABEL, INSTANCE_LABEL, MANAGED_BY_LABEL, COMPONENT_LABEL)

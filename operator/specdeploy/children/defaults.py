"""Operator-wide defaults for every resource's engine pods (``specdeploy run --default-...``, the
chart's ``enginePodDefaults``), and how a resource's own fields override them.

A platform sets once what every engine pod on its cluster needs (on AKS, where every GPU node
carries a taint, the toleration of that taint). The builders take them as a value, so
``specdeploy render`` and the operator build the same pods from the same inputs:

- tolerations: the defaults, then ``spec.scheduling.tolerations`` (both apply);
- node selector: the defaults, each key overridden by the same key in ``spec.scheduling.nodeSelector``;
- image pull secrets: the defaults, then ``spec.podTemplate``'s (merged by name);
- hub token: ``spec.modelAccess.tokenSecretRef`` replaces the default Secret. The default one is
  optional: a namespace without that Secret runs its pods (and the operator's lookups) without a
  token, where a resource's own missing Secret stops them.
"""

from __future__ import annotations

from dataclasses import dataclass

from specdeploy import api


@dataclass(frozen=True)
class TokenRef:
    """The hub token Secret engine pods read: the resource's, else the operator-wide default."""

    name: str
    key: str
    # A default: a namespace without the Secret runs without a token.
    optional: bool


@dataclass(frozen=True)
class PodDefaults:
    """What every engine pod gets unless its resource says otherwise (module docstring)."""

    tolerations: tuple[api.Toleration, ...] = ()
    node_selector: tuple[tuple[str, str], ...] = ()
    image_pull_secrets: tuple[str, ...] = ()
    token_secret: api.SecretKeyRef | None = None

    def token(self, spec: api.SpeculativeDeploymentSpec) -> TokenRef | None:
        """The hub token Secret of ``spec``'s pods and of the operator's lookups for it."""
        own = spec.model_access.token_secret_ref
        if own is not None:
            return TokenRef(own.name, own.key, optional=False)
        if self.token_secret is not None:
            return TokenRef(self.token_secret.name, self.token_secret.key, optional=True)
        return None


NO_DEFAULTS = PodDefaults()

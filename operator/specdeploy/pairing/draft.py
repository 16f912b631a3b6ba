"""What a draft's config.json says, whichever of the two EAGLE-3 formats it uses."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specdeploy.modelinfo.config import (
    DraftFormat,
    architectures,
    as_int,
    draft_format,
    draft_layer_config,
    draft_method,
)


@dataclass(frozen=True)
class DraftFacts:
    """What a draft's config.json says, whichever of the two EAGLE-3 formats it uses."""

    format: DraftFormat
    method: str | None
    architecture: str | None
    hidden_size: int | None
    target_hidden_size: int | None
    vocab_size: int | None
    draft_vocab_size: int | None
    aux_layer_ids: list[int] | None
    declared_verifier: str | None
    declared_architectures: list[str]
    speculative_tokens: int | None

    @property
    def expected_hidden_size(self) -> int | None:
        return self.target_hidden_size or self.hidden_size


def _mapping(value: Any) -> Mapping[str, Any]:
    """A nested section of the config, empty when absent or not an object."""
    return value if isinstance(value, Mapping) else {}


def _layer_ids(value: Any) -> list[int] | None:
    """The auxiliary hidden-state layer ids, None when absent or not a list of integers (the
    layer rule then says it cannot check them)."""
    if not isinstance(value, list) or any(as_int(item) is None for item in value):
        return None
    return [int(item) for item in value]


def draft_facts(config: Mapping[str, Any]) -> DraftFacts:
    """Read a draft config in the speculators format or the original EAGLE-3 format."""
    archs = architectures(config)
    architecture = archs[0] if archs else None
    fmt = draft_format(config)
    if fmt == "speculators":
        layer = draft_layer_config(config)
        spec_cfg = _mapping(config.get("speculators_config"))
        verifier = _mapping(spec_cfg.get("verifier"))
        tokens: int | None = None
        methods = spec_cfg.get("proposal_methods")
        if isinstance(methods, list) and methods and isinstance(methods[0], Mapping):
            tokens = as_int(methods[0].get("speculative_tokens"))
        aux = config.get("eagle_aux_hidden_state_layer_ids")
        return DraftFacts(
            format="speculators",
            method=draft_method(config),
            architecture=architecture,
            hidden_size=as_int(layer.get("hidden_size")) or as_int(config.get("hidden_size")),
            target_hidden_size=as_int(config.get("target_hidden_size")),
            vocab_size=as_int(layer.get("vocab_size")) or as_int(config.get("vocab_size")),
            draft_vocab_size=as_int(config.get("draft_vocab_size")),
            aux_layer_ids=_layer_ids(aux),
            declared_verifier=str(verifier["name_or_path"]) if verifier.get("name_or_path") else None,
            declared_architectures=architectures(verifier),
            speculative_tokens=tokens,
        )
    eagle_cfg = _mapping(config.get("eagle_config"))
    aux = eagle_cfg.get("eagle_aux_hidden_state_layer_ids", config.get("eagle_aux_hidden_state_layer_ids"))
    return DraftFacts(
        format=fmt,
        method=draft_method(config),
        architecture=architecture,
        hidden_size=as_int(config.get("hidden_size")),
        target_hidden_size=as_int(config.get("target_hidden_size")),
        vocab_size=as_int(config.get("vocab_size")),
        draft_vocab_size=as_int(config.get("draft_vocab_size")),
        aux_layer_ids=_layer_ids(aux),
        declared_verifier=None,
        declared_architectures=[],
        speculative_tokens=None,
    )

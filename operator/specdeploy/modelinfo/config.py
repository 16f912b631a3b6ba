"""Reading config.json: the rules every stage shares for where a field lives and what a draft is.

A multimodal verifier nests its language model under ``text_config``; an EAGLE-3 draft comes in
the speculators format (``speculators_model_type``, ``transformer_layer_config``) or the original
EAGLE-3 format (an ``Eagle3...`` architecture). Pairing and planning read configs through these
functions, so each rule is written once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

DraftFormat = Literal["speculators", "eagle3", "eagle", "unknown"]


def as_int(value: Any) -> int | None:
    """An integer field's value, or None when absent or not an integer (JSON true is not 1)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language-model part of a config: ``text_config`` when it nests one, else the config."""
    text = config.get("text_config")
    return text if isinstance(text, Mapping) else config


def text_field(config: Mapping[str, Any], name: str) -> Any:
    """A field of a (possibly multimodal) config: top level, else ``text_config``."""
    if config.get(name) is not None:
        return config[name]
    return text_config(config).get(name)


def architectures(config: Mapping[str, Any]) -> list[str]:
    """The ``architectures`` list as strings (empty when absent)."""
    return [str(a) for a in config.get("architectures") or []]


def draft_format(config: Mapping[str, Any]) -> DraftFormat:
    """Which checkpoint layout a draft config uses (``eagle`` is EAGLE-1/2, not EAGLE-3)."""
    if config.get("speculators_model_type"):
        return "speculators"
    lowered = [a.lower() for a in architectures(config)]
    if any("eagle3" in a for a in lowered):
        return "eagle3"
    if any("eagle" in a for a in lowered):
        return "eagle"
    return "unknown"


def draft_method(config: Mapping[str, Any]) -> str | None:
    """The speculative method a draft checkpoint was trained for (``eagle3``, ``eagle``, ...), or None."""
    fmt = draft_format(config)
    if fmt == "speculators":
        return str(config["speculators_model_type"])
    return None if fmt == "unknown" else fmt


def is_eagle3_draft(config: Mapping[str, Any]) -> bool:
    """An EAGLE-3 draft, in either format: the pairing check's method rule and the planner's sizing."""
    return draft_method(config) == "eagle3"


def draft_layer_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The draft's decoder-layer config: speculators nest it under ``transformer_layer_config``."""
    layer = config.get("transformer_layer_config")
    return layer if isinstance(layer, Mapping) else config

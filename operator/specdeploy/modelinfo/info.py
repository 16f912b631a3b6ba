"""What the operator knows about one model: its config.json, weight size and tokenizer files.

``ModelInfo`` is the value every later stage reads; ``ModelUnavailable`` is the one error any
source (a local directory, a ConfigMap, the catalog, the Hub) raises, with a stable reason, so
the operator reports a condition instead of crashing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

InfoSource = Literal["catalog", "hub", "local", "configmap", "inline"]

DEFAULT_REVISION = "main"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")

UnavailableReason = Literal["HubUnreachable", "ModelNotFound", "GatedOrUnauthorized", "InvalidConfig"]


def model_key(model_id: str) -> str:
    """The one comparison form of a model id: Hub ids are case-insensitive, a trailing / is noise."""
    return model_id.strip().rstrip("/").lower()


@dataclass(frozen=True)
class ModelInfo:
    """config.json of one model at one revision, plus what else was found next to it.

    ``provenance`` says where catalog facts were taken from; ``note`` says why a lookup answered
    as it did (catalog facts standing in for an unreachable Hub); ``tokenizer_note`` says why
    there is no ``tokenizer_dir`` when one was looked for (the tokenizer rule's Skipped message).
    """

    model_id: str
    revision: str | None
    config: dict[str, Any]
    source: InfoSource
    weights_bytes: int | None = None
    tokenizer_dir: Path | None = None
    provenance: str | None = None
    note: str | None = None
    tokenizer_note: str | None = None


class ModelUnavailable(Exception):
    """A model's metadata could not be obtained; ``reason`` is stable, the message names the model."""

    def __init__(self, reason: UnavailableReason, model_id: str, message: str) -> None:
        super().__init__(message)
        self.reason: UnavailableReason = reason
        self.model_id = model_id
        self.message = message


def info_from_config(
    model_id: str,
    config: dict[str, Any] | str | bytes,
    *,
    revision: str | None = None,
    source: InfoSource = "configmap",
) -> ModelInfo:
    """Metadata from a config.json given inline (a ConfigMap's verifier.json / speculator.json),
    for models the operator cannot reach."""
    if isinstance(config, str | bytes):
        try:
            config = json.loads(config)
        except ValueError as exc:
            raise ModelUnavailable(
                "InvalidConfig", model_id, f"config.json of {model_id} is not valid JSON: {exc}"
            ) from exc
    return ModelInfo(model_id=model_id, revision=revision, config=_checked(model_id, config), source=source)


def config_problem(config: object) -> str | None:
    """What keeps ``config`` from being a config.json every later stage can read (None: nothing)."""
    if not isinstance(config, dict):
        return "is not a JSON object"
    if not config.get("architectures") and not config.get("model_type"):
        return "has neither architectures nor model_type"
    found = config.get("architectures")
    if found is not None and not (isinstance(found, list) and all(isinstance(a, str) for a in found)):
        return f"has architectures {json.dumps(found)[:80]}, not a list of class names"
    return None


def _checked(model_id: str, config: object) -> dict[str, Any]:
    """``config`` if it is a config.json every later stage can read, else InvalidConfig."""
    problem = config_problem(config)
    if problem is not None:
        raise ModelUnavailable("InvalidConfig", model_id, f"config.json of {model_id} {problem}")
    assert isinstance(config, dict)
    return config


def read_config(model_id: str, path: Path) -> dict[str, Any]:
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelUnavailable(
            "InvalidConfig", model_id, f"config.json of {model_id} cannot be read: {exc}"
        ) from exc
    return _checked(model_id, config)


def index_total(path: Path) -> int | None:
    """metadata.total_size of a model.safetensors.index.json, when present and sane."""
    try:
        index = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    total = index.get("metadata", {}).get("total_size") if isinstance(index, dict) else None
    return int(total) if isinstance(total, int | float) and total > 0 else None


def local_info(directory: Path, revision: str | None) -> ModelInfo:
    model_id = str(directory)
    config = read_config(model_id, directory / "config.json")
    weights: int | None = None
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        weights = index_total(index)
    if weights is None:
        shards = list(directory.glob("*.safetensors"))
        weights = sum(p.stat().st_size for p in shards) if shards else None
    has_tokenizer = any((directory / name).is_file() for name in TOKENIZER_FILES)
    return ModelInfo(
        model_id=model_id,
        revision=revision,
        config=config,
        source="local",
        weights_bytes=weights,
        tokenizer_dir=directory if has_tokenizer else None,
    )

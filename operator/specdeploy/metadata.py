"""Model metadata: what the pairing check and the GPU planner know about one model."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

MetadataSource = Literal["catalog", "hub", "local", "configmap", "inline"]


@dataclass(frozen=True)
class ModelMetadata:
    """config.json of one model at one revision, plus what else was found next to it."""

    model_id: str
    revision: str | None
    config: dict[str, Any]
    source: MetadataSource
    weights_bytes: int | None = None
    tokenizer_dir: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)

"""The built-in catalog of well-known verifiers and speculators, kept as data (data/catalog.yaml).

It lets the pairing check, the shorthands and the GPU planner work without reaching the Hub
(air-gapped clusters, the sandbox, the admission webhook's short deadline). Operators extend it
with a YAML file named by ``SPECDEPLOY_CATALOG`` (the Helm chart mounts a ConfigMap there).
"""

from __future__ import annotations

import os
import threading
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from specdeploy.modelinfo.info import ModelInfo, model_key

CATALOG_ENV = "SPECDEPLOY_CATALOG"

SupportLevel = Literal["confirmed", "unconfirmed", "unsupported"]
_T = TypeVar("_T")


class _Entry(BaseModel):
    """camelCase in YAML, immutable once loaded, unknown keys rejected so typos surface."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True, extra="forbid")


class EngineSupport(_Entry):
    """Which verifier architectures an engine serves with an EAGLE-3 draft."""

    eagle3: dict[str, SupportLevel] = Field(default_factory=dict)
    note: str = ""


class _ModelEntry(_Entry):
    """What the catalog knows of any model: its config facts, their source, its weights size."""

    provenance: str
    config: dict[str, Any]
    weights_bytes: int | None = None


class VerifierEntry(_ModelEntry):
    """A verifier's facts, its chat marker and its recommended speculator per engine."""

    chat_marker: str | None = None
    recommended_speculators: dict[str, str] = Field(default_factory=dict)


class SpeculatorEntry(_ModelEntry):
    """A draft's facts, the verifier it was trained for, and its published engine settings."""

    trained_for: str | None = None
    settings: dict[str, dict[str, int]] = Field(default_factory=dict)


class Catalog(_Entry):
    """The whole catalog; model ids are kept as written and looked up case-insensitively."""

    engines: dict[str, EngineSupport] = Field(default_factory=dict)
    verifiers: dict[str, VerifierEntry] = Field(default_factory=dict)
    speculators: dict[str, SpeculatorEntry] = Field(default_factory=dict)

    def verifier(self, model_id: str) -> tuple[str, VerifierEntry] | None:
        return _lookup(self.verifiers, model_id)

    def speculator(self, model_id: str) -> tuple[str, SpeculatorEntry] | None:
        return _lookup(self.speculators, model_id)


def _lookup(entries: dict[str, _T], model_id: str) -> tuple[str, _T] | None:
    """Hub ids are case-insensitive, so the catalog is too."""
    wanted = model_key(model_id)
    for key, entry in entries.items():
        if model_key(key) == wanted:
            return key, entry
    return None


def _read_yaml(text: str, origin: str) -> dict[str, Any]:
    data = yaml.safe_load(text) or {}
    if not isinstance(data, dict):
        raise ValueError(f"catalog {origin}: top level must be a mapping")
    return data


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """Entries of an extension replace built-in ones by id; engine tables merge per architecture."""
    merged = {section: dict(base.get(section) or {}) for section in ("engines", "verifiers", "speculators")}
    for section in ("verifiers", "speculators"):
        for model_id, entry in (extra.get(section) or {}).items():
            existing = _lookup(merged[section], model_id)
            if existing is not None:
                del merged[section][existing[0]]
            merged[section][model_id] = entry
    for engine, table in (extra.get("engines") or {}).items():
        current = dict(merged["engines"].get(engine) or {})
        current["eagle3"] = {**(current.get("eagle3") or {}), **(table.get("eagle3") or {})}
        if "note" in table:
            current["note"] = table["note"]
        merged["engines"][engine] = current
    unknown = set(extra) - {"engines", "verifiers", "speculators"}
    if unknown:
        raise ValueError(f"catalog extension: unknown sections {sorted(unknown)}")
    return merged


_LOADING = threading.Lock()


@lru_cache(maxsize=8)
def _load(extra_path: str | None) -> Catalog:
    builtin = resources.files("specdeploy").joinpath("data/catalog.yaml").read_text(encoding="utf-8")
    data = _read_yaml(builtin, "built-in")
    if extra_path:
        data = _merge(data, _read_yaml(Path(extra_path).read_text(encoding="utf-8"), extra_path))
    return Catalog.model_validate(data)


def load(extra_path: str | None = None) -> Catalog:
    """The catalog, merged with ``extra_path`` or else the file named by SPECDEPLOY_CATALOG (cached).

    Serialized: at operator start every reconcile thread asks at once, and without the lock each
    parsed the YAML itself before the cache held it."""
    path = extra_path if extra_path is not None else os.environ.get(CATALOG_ENV) or None
    with _LOADING:
        return _load(path)


def verifier_entry(model_id: str) -> VerifierEntry | None:
    found = load().verifier(model_id)
    return found[1] if found else None


def speculator_entry(model_id: str) -> SpeculatorEntry | None:
    found = load().speculator(model_id)
    return found[1] if found else None


def speculator_settings(speculator_id: str, engine: str) -> dict[str, int]:
    """Published engine settings of a speculator (vllm: numSpeculativeTokens; sglang: numSteps,
    eagleTopk, numDraftTokens); empty when the catalog has none."""
    entry = speculator_entry(speculator_id)
    return dict(entry.settings.get(engine, {})) if entry else {}


def recommended_speculator(verifier_id: str, engine: str) -> str | None:
    """The speculator the verifier-only shorthand uses for this engine, if the catalog knows one."""
    entry = verifier_entry(verifier_id)
    return entry.recommended_speculators.get(engine) if entry else None


def trained_for(speculator_id: str) -> str | None:
    """The verifier a catalog speculator was trained for (original-format drafts do not say)."""
    entry = speculator_entry(speculator_id)
    return entry.trained_for if entry else None


def chat_marker(verifier_id: str) -> str | None:
    """The text a correctly rendered user turn of this verifier's chat template contains."""
    entry = verifier_entry(verifier_id)
    return entry.chat_marker if entry else None


def engine_supports(engine: str, architecture: str) -> bool | None:
    """True when the engine's EAGLE-3 support for the architecture is confirmed, None when it is
    believed but unconfirmed (or the engine is unknown), False when unsupported."""
    table = load().engines.get(engine)
    if table is None:
        return None
    level = table.eagle3.get(architecture, "unsupported")
    if level == "confirmed":
        return True
    return None if level == "unconfirmed" else False


def supported_architectures(engine: str) -> list[str]:
    """Architectures with confirmed or unconfirmed support, for messages."""
    table = load().engines.get(engine)
    if table is None:
        return []
    return [arch for arch, level in table.eagle3.items() if level != "unsupported"]


def model_info(model_id: str) -> ModelInfo | None:
    """Catalog facts of a verifier or speculator as ModelInfo (source "catalog")."""
    catalog = load()
    found: tuple[str, _ModelEntry] | None = catalog.verifier(model_id) or catalog.speculator(model_id)
    if found is None:
        return None
    key, entry = found
    return ModelInfo(
        model_id=key,
        revision=None,
        config=dict(entry.config),
        source="catalog",
        weights_bytes=entry.weights_bytes,
        provenance=entry.provenance,
    )

"""The image map: which local runtime runs a container image on an engine node.

Engine nodes pull nothing; ``data/sandbox-images.yaml`` (its header says how) maps image globs
to runtimes, directories of executables the node was started with. An image that maps to no
runtime the node has fails the way a real pull does, so the pod shows why it cannot start.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

IMAGE_MAP_FILE = "sandbox-images.yaml"


class ImageMapError(ValueError):
    """The image map file is invalid."""


class ImagePullError(Exception):
    """The image cannot run on this node; the message reads like kubelet's pull failure."""


class _Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True)

    pattern: str
    runtime: str
    env: dict[str, str] | None = None
    entrypoint: list[str] | None = None


@dataclass(frozen=True)
class ImageRule:
    pattern: str
    runtime: str
    env: Mapping[str, str] = field(default_factory=dict)
    entrypoint: tuple[str, ...] = ()


@dataclass(frozen=True)
class ResolvedImage:
    """How to run one image: the runtime's directory goes first on PATH, ``env`` is the image ENV,
    ``entrypoint`` the image ENTRYPOINT (empty: unknown, the container must give a command)."""

    image: str
    runtime: str
    bin_dir: Path
    env: Mapping[str, str]
    entrypoint: tuple[str, ...] = ()

    @property
    def image_id(self) -> str:
        return f"sandbox-runtime://{self.runtime}/{self.image}"


@dataclass(frozen=True)
class ImageMap:
    rules: tuple[ImageRule, ...]
    source: str

    def resolve(self, image: str, runtimes: Mapping[str, Path]) -> ResolvedImage:
        """The first matching rule's runtime, if this node has it; else ImagePullError."""
        rule = next((r for r in self.rules if fnmatch.fnmatchcase(image, r.pattern)), None)
        if rule is None:
            raise ImagePullError(
                f'Failed to pull image "{image}": no entry of the sandbox image map {self.source} '
                "matches it (engine nodes run images through local runtimes only)"
            )
        bin_dir = runtimes.get(rule.runtime)
        if bin_dir is None:
            provided = ", ".join(sorted(runtimes)) or "none"
            raise ImagePullError(
                f'Failed to pull image "{image}": the sandbox image map {self.source} runs it with '
                f'runtime "{rule.runtime}", which this engine node does not have (it has: {provided})'
            )
        return ResolvedImage(image, rule.runtime, bin_dir, dict(rule.env), rule.entrypoint)


def parse_image_map(text: str, source: str) -> ImageMap:
    try:
        rules = TypeAdapter(list[_Rule]).validate_python(yaml.safe_load(text))
    except (ValidationError, yaml.YAMLError) as exc:
        raise ImageMapError(
            f"{source}: not a list of {{pattern, runtime, env, entrypoint}} entries: {exc}"
        ) from None
    return ImageMap(
        tuple(ImageRule(r.pattern, r.runtime, dict(r.env or {}), tuple(r.entrypoint or ())) for r in rules),
        source,
    )


def load_image_map(path: Path | None = None) -> ImageMap:
    """The map in ``path``, or the packaged one."""
    if path is not None:
        return parse_image_map(path.read_text(), str(path))
    packaged = resources.files("specdeploy_sandbox").joinpath("data", IMAGE_MAP_FILE)
    return parse_image_map(packaged.read_text(), str(packaged))

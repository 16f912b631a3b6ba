"""Inference engines: turn an effective spec into the engine container's launch.

``render`` and ``validate`` (or ``engine_for`` for the engine itself) are all the rest of the
operator needs; each engine module keeps its pinned version, image, flags and rules to itself.
"""

from __future__ import annotations

from specdeploy import api
from specdeploy.engines import failures
from specdeploy.engines.base import Engine, EngineLaunch, FieldError
from specdeploy.engines.sglang import SglangEngine
from specdeploy.engines.vllm import VllmEngine

__all__ = [
    "ENGINES",
    "Engine",
    "EngineLaunch",
    "FieldError",
    "engine_for",
    "render",
    "root_cause",
    "validate",
]

ENGINES: dict[str, Engine] = {"vllm": VllmEngine(), "sglang": SglangEngine()}


def engine_for(name: str) -> Engine:
    """The engine called ``name``; unknown names are a bug upstream (the CRD enum rejects them)."""
    engine = ENGINES.get(name)
    if engine is None:
        raise ValueError(f"unknown engine {name!r}; known: {', '.join(ENGINES)}")
    return engine


def render(spec: api.SpeculativeDeploymentSpec) -> EngineLaunch:
    """The launch of an effective spec on the engine it names."""
    return engine_for(spec.engine.name).render(spec)


def validate(spec: api.SpeculativeDeploymentSpec) -> list[FieldError]:
    """Engine rules the CRD cannot express; run it on the effective spec."""
    return engine_for(spec.engine.name).validate(spec)


def root_cause(engine: str, log: str) -> str | None:
    """The error an engine that failed to start printed, from the end of its log: the last
    exception that is not one of the engine's pointers back at it (an engine label naming no
    engine gets no pointers skipped)."""
    known = ENGINES.get(engine)
    return failures.root_cause(log, known.startup_pointers if known else ())

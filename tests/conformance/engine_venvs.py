"""Cached virtual environments holding each engine at the version of its default image.

The engines are several GB each and take minutes to install, so they live outside the checkout
under ``${XDG_CACHE_HOME:-~/.cache}/specdeploy/venvs/<engine>-<version>``, installed (with pip)
by the sandbox's cached-venv installer, ``specdeploy.sandbox.venvs``: ready once its marker is
written, redone after an interrupted install, locked against concurrent test sessions.
``python engine_venvs.py vllm 0.33.0`` builds one ahead of a test run (a CI cache warm-up step).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from specdeploy.sandbox import venvs

DEFAULT_INSTALL_TIMEOUT_S = 1500


def install_timeout() -> float:
    """Upper bound for creating one venv (SPECDEPLOY_CONFORMANCE_INSTALL_TIMEOUT, seconds)."""
    return float(os.environ.get("SPECDEPLOY_CONFORMANCE_INSTALL_TIMEOUT", DEFAULT_INSTALL_TIMEOUT_S))


def ensure_venv(engine: str, version: str, requirement: str) -> Path:
    """The python of the ready venv for ``engine==version``, installing ``requirement`` on first use."""

    def install(path: Path, steps: venvs.Steps) -> None:
        pip = [str(path / "bin" / "python"), "-m", "pip", "install", "--quiet"]
        steps.run("upgrading pip", [*pip, "--upgrade", "pip"])
        steps.run(f"installing {requirement}", [*pip, requirement])

    name = f"{engine}-{version}"
    return venvs.ensure(name, requirement, install, sys.stderr, install_timeout()) / "bin" / "python"


if __name__ == "__main__":
    engine_name, engine_version = sys.argv[1], sys.argv[2]
    print(ensure_venv(engine_name, engine_version, f"{engine_name}=={engine_version}").parent.parent)

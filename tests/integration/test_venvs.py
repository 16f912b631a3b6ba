"""Cached tool environments: a failed install leaves nothing half-made, a finished one is reused."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from specdeploy_sandbox import venvs


def test_a_failed_install_is_removed_and_reported_then_a_good_one_is_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPECDEPLOY_CACHE_DIR", str(tmp_path))
    progress = io.StringIO()

    def broken(path: Path, steps: venvs.Steps) -> None:
        steps.run(
            "a step that fails", [str(path / "bin" / "python"), "-c", "raise SystemExit('no such wheel')"]
        )

    with pytest.raises(venvs.VenvInstallError) as failure:
        venvs.ensure("tool-1", "a tool", broken, progress, timeout=120)
    assert "a step that fails: exit 1" in str(failure.value) and "no such wheel" in str(failure.value)
    assert not venvs.venv_path("tool-1").exists()
    assert "no such wheel" in (tmp_path / "venvs" / "tool-1.install.log").read_text()

    calls: list[Path] = []
    path = venvs.ensure("tool-1", "a tool", lambda p, _: calls.append(p), progress, timeout=120)
    again = venvs.ensure("tool-1", "a tool", lambda p, _: calls.append(p), progress, timeout=120)
    assert path == again and calls == [path] and venvs.is_ready(path)
    assert (path / "bin" / "python").exists()
    assert "a tool installed in" in progress.getvalue()

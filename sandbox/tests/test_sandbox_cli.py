"""`specdeploy sandbox` verbs that need no running cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from specdeploy.cli import main
from specdeploy_sandbox import binaries, cluster


def test_failed_build_exits_2_with_the_reason(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    def no_go(self: cluster.Sandbox, **_: object) -> None:
        raise binaries.BuildError("the Go toolchain is needed: install Go")

    monkeypatch.setenv(cluster.ROOT_ENV, str(tmp_path))
    monkeypatch.setattr(cluster.Sandbox, "up", no_go)
    assert main(["sandbox", "up", "--name", "unit"]) == 2
    assert "install Go" in capsys.readouterr().err


def test_env_and_status_of_a_stopped_sandbox(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv(cluster.ROOT_ENV, str(tmp_path))
    assert main(["sandbox", "env", "--name", "unit"]) == 1
    assert main(["sandbox", "status", "--name", "unit"]) == 1
    assert main(["sandbox", "down", "--name", "unit"]) == 0
    out = capsys.readouterr()
    assert "export" not in out.out
    assert "not running" in out.err

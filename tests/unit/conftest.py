"""The unit suite never talks to a cluster: no kubeconfig, whatever the machine running it has.

``plan`` and ``render`` plan against the current kubeconfig's cluster when there is one, so a
developer's own kubeconfig would otherwise reach their cluster from a unit test.
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _no_kubeconfig(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    monkeypatch.setenv("KUBECONFIG", str(Path(tmp_path_factory.getbasetemp()) / "no-kubeconfig"))

"""The wait helper of the cluster suites: bounded, and it shows the cluster when it gives up."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from support.kube import Kubectl, WaitFor


class FakeKubectl(Kubectl):
    def __init__(self) -> None:
        super().__init__("kubectl", Path("kubeconfig"))
        self.calls: list[tuple[str, ...]] = []

    def run(
        self, *args: str, input: str | None = None, namespace: str | None = None, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        self.calls.append(args)
        return subprocess.CompletedProcess(args, 0, stdout=f"<output of {' '.join(args)}>\n", stderr="")


def test_wait_for_returns_the_first_truthy_value() -> None:
    values = iter([None, [], ["pod"]])
    assert WaitFor(FakeKubectl(), "ns")(lambda: next(values), timeout=5) == ["pod"]


def test_wait_for_timeout_dumps_namespace_and_nodes() -> None:
    kubectl = FakeKubectl()

    def failing() -> bool:
        raise RuntimeError("not yet")

    with pytest.raises(pytest.fail.Exception) as info:
        WaitFor(kubectl, "ns")(failing, timeout=0.1, describe="the thing")
    message = str(info.value)
    assert "waiting for the thing" in message
    assert "RuntimeError('not yet')" in message
    assert "<output of get all,events -o wide --namespace=ns>" in message
    assert "<output of get nodes -o wide>" in message

"""The bind hook: wildcard IPv4 listeners bind the pod's loopback IP instead."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from specdeploy_sandbox.enginenode import bind_hook

POD_IP = "127.42.128.77"


@pytest.fixture
def restore_bind() -> Iterator[None]:
    original = socket.socket.bind
    try:
        yield
    finally:
        socket.socket.bind = original  # type: ignore[method-assign]


def bound(host: str) -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return str(sock.getsockname()[0])


def test_wildcards_bind_the_pod_ip_and_explicit_addresses_stay(
    monkeypatch: pytest.MonkeyPatch, restore_bind: None
) -> None:
    monkeypatch.setenv(bind_hook.POD_IP_ENV, POD_IP)
    bind_hook.install()
    bind_hook.install()  # a second install does not wrap twice
    assert bound("0.0.0.0") == POD_IP
    assert bound("") == POD_IP
    assert bound("127.0.0.1") == "127.0.0.1"


def test_without_the_pod_ip_nothing_changes(monkeypatch: pytest.MonkeyPatch, restore_bind: None) -> None:
    monkeypatch.delenv(bind_hook.POD_IP_ENV, raising=False)
    original = socket.socket.bind
    bind_hook.install()
    assert socket.socket.bind is original

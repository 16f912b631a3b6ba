"""The malloc arena cap the operator sets at start (controller/malloc_arenas.py)."""

from __future__ import annotations

import platform

import pytest

from specdeploy.controller import malloc_arenas


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_glibc_accepts_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert malloc_arenas.cap_arenas()


def test_the_environment_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert not malloc_arenas.cap_arenas()

"""Wildcard listeners bind the pod's IP: the process-level stand-in for a pod's network namespace.

Engine-node pods share the host's network, so two engines that both listen on ``0.0.0.0:8000``
would collide. With ``SPECDEPLOY_SANDBOX_POD_IP`` set (the engine node sets it in every
container), ``install()`` makes an IPv4 bind to ``""`` or ``0.0.0.0`` bind that IP instead.

Standalone on purpose (standard library only): it is copied into engine environments and loaded
from a ``.pth`` file before the engine's own code runs.
"""

from __future__ import annotations

import os
import socket
from typing import Any

POD_IP_ENV = "SPECDEPLOY_SANDBOX_POD_IP"
_WILDCARDS = ("", "0.0.0.0")


def install() -> None:
    """Patch ``socket.socket.bind`` once; a no-op without the pod IP in the environment."""
    pod_ip = os.environ.get(POD_IP_ENV)
    original = socket.socket.bind
    if not pod_ip or getattr(original, "_specdeploy_pod_ip", None):
        return

    def bind(self: socket.socket, address: Any) -> None:
        if self.family == socket.AF_INET and isinstance(address, tuple) and address[0] in _WILDCARDS:
            address = (pod_ip, *address[1:])
        original(self, address)

    bind._specdeploy_pod_ip = pod_ip  # type: ignore[attr-defined]
    socket.socket.bind = bind  # type: ignore[method-assign,assignment]

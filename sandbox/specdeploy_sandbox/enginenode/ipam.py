"""Pod IPs of one engine node: its own loopback /24, lowest free address first from .2 up.

All of 127.0.0.0/8 is loopback on Linux, so a process can listen on any of these addresses with
no setup; giving each pod its own address lets every engine listen on its usual port.
"""

from __future__ import annotations

import ipaddress
import threading


class AddressesExhausted(RuntimeError):
    """Every address of the node's range is taken."""


class IpAllocator:
    """Thread-safe: pod workers allocate and release concurrently."""

    def __init__(self, cidr: str) -> None:
        network = ipaddress.ip_network(cidr)
        # .0 is the network, .1 the range's gateway by convention, the last one broadcast.
        self._addresses = [str(a) for a in network.hosts()][1:]
        self._owners: dict[str, str] = {}
        self._lock = threading.Lock()

    def allocate(self, owner: str, preferred: str | None = None) -> str:
        """The owner's address (the same one again if it has one), ``preferred`` when free."""
        with self._lock:
            taken = {ip: who for who, ip in self._owners.items()}
            if owner in self._owners:
                return self._owners[owner]
            if preferred is not None and preferred in self._addresses and preferred not in taken:
                self._owners[owner] = preferred
                return preferred
            for address in self._addresses:
                if address not in taken:
                    self._owners[owner] = address
                    return address
        raise AddressesExhausted(f"no free pod IP left in {len(self._addresses)} addresses")

    def release(self, owner: str) -> None:
        with self._lock:
            self._owners.pop(owner, None)

"""Pure helpers of the sandbox process manager."""

from __future__ import annotations

import ipaddress
import os
import socket

from specdeploy.sandbox import cluster


def test_pod_cidrs_are_loopback_and_distinct_per_sandbox() -> None:
    default = ipaddress.ip_network(cluster.pod_cidr("default"))
    other = ipaddress.ip_network(cluster.pod_cidr("pytest-123"))
    assert default == ipaddress.ip_network("127.42.0.0/16")
    loopback = ipaddress.ip_network("127.0.0.0/8")
    assert default.subnet_of(loopback) and other.subnet_of(loopback)
    assert default != other


def test_free_ports_are_distinct_and_bindable() -> None:
    ports = cluster.free_ports(5)
    assert len(set(ports)) == 5
    assert all(cluster.port_is_free(port) for port in ports)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        assert not cluster.port_is_free(sock.getsockname()[1])


def test_pid_alive_checks_the_recorded_start_time() -> None:
    me = os.getpid()
    assert cluster.pid_alive(me, cluster.process_start_time(me))
    assert not cluster.pid_alive(me, "0")

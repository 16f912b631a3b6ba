"""Pure helpers of the sandbox process manager."""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil  # type: ignore[import-untyped]

from specdeploy_sandbox import cluster, processes


def test_pod_cidrs_are_loopback_and_distinct_per_sandbox() -> None:
    default = ipaddress.ip_network(cluster.pod_cidr("default"))
    other = ipaddress.ip_network(cluster.pod_cidr("pytest-123"))
    assert default == ipaddress.ip_network("127.42.0.0/16")
    loopback = ipaddress.ip_network("127.0.0.0/8")
    assert default.subnet_of(loopback) and other.subnet_of(loopback)
    assert default != other


def test_free_ports_are_distinct_and_bindable() -> None:
    ports = processes.free_ports(5)
    assert len(set(ports)) == 5
    assert all(processes.port_is_free(port) for port in ports)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        assert not processes.port_is_free(sock.getsockname()[1])


def test_pid_alive_checks_the_recorded_start_time() -> None:
    me = os.getpid()
    assert processes.pid_alive(me, processes.process_start_time(me))
    assert not processes.pid_alive(me, "0")


def test_a_zombie_counts_as_dead() -> None:
    # The shell's background child exits and nobody reaps it: `exec sleep` never waits.
    shell = subprocess.Popen(["sh", "-c", "sleep 0 & exec sleep 30"])
    try:
        zombies: list[int] = []
        deadline = time.monotonic() + 5
        while not zombies and time.monotonic() < deadline:
            children = psutil.Process(shell.pid).children()
            zombies = [c.pid for c in children if c.status() == psutil.STATUS_ZOMBIE]
            time.sleep(0.02)
        assert zombies, "the background child should have become a zombie"
        assert not processes.pid_alive(zombies[0])
        assert processes.pid_alive(shell.pid, processes.process_start_time(shell.pid))
    finally:
        shell.kill()
        shell.wait()


def test_rss_is_reported_in_mib_for_live_processes_only() -> None:
    rss = processes.rss_mib(os.getpid())
    assert rss is not None and 1 < rss < 100_000
    exited = subprocess.Popen([sys.executable, "-c", "pass"])
    exited.wait()
    assert processes.rss_mib(exited.pid) is None
    assert processes.process_start_time(exited.pid) is None


def test_spawned_processes_are_stopped_and_then_dead(tmp_path: Path) -> None:
    pid = processes.spawn(["sleep", "30"], tmp_path / "sleep.log", tmp_path)
    start = processes.process_start_time(pid)
    assert start is not None and processes.pid_alive(pid, start)
    processes.stop_in_tiers([[(pid, start)]], timeout=5.0)
    assert not processes.pid_alive(pid, start)

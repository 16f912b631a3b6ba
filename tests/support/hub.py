"""A local model hub (the sandbox's olah) serving git mirrors, for the suites that need a hub of
their own rather than the sandbox's: started on a loopback port, stopped with the block."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from specdeploy_sandbox.model_hub import hub_argv, hub_environ, wait_ready, write_config
from specdeploy_sandbox.processes import free_ports, stop_child

READY_S = 60.0


@contextmanager
def running_hub(
    python: Path, base: Path, mirrors: Path, repos: Path, home: Path
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The hub's endpoint once it answers, and its process; its output goes to base/olah.out."""
    port = free_ports(1)[0]
    config = base / "olah.toml"
    write_config(config, port, mirrors, repos)
    with (base / "olah.out").open("wb") as out:
        process = subprocess.Popen(
            hub_argv(python, config),
            env=hub_environ(home),
            cwd=base,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        wait_ready(endpoint, READY_S)
        yield endpoint, process
    finally:
        stop_child(process, 10)

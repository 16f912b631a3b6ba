"""Run a program that listens on every interface in a network namespace of its own, reaching the
sandbox's apiserver through a Unix socket.

Karpenter's KWOK provider binds its metrics and health servers to ``:PORT`` with no setting for
the address. Every server the sandbox starts listens on loopback only, so the provider runs in a
new network namespace (``unshare --net``) whose one interface is its own loopback: there "every
interface" is loopback. Two bridges carry the apiserver's TLS bytes unchanged:

    provider -> 127.0.0.1:PORT in the namespace  (``inside``, which also runs the provider)
             -> Unix socket SOCKET
             -> 127.0.0.1:PORT in the sandbox    (``outside``)

so the sandbox's kubeconfig (``https://127.0.0.1:PORT``) works unchanged in the namespace.

    python -m specdeploy_sandbox.loopback_bridge outside SOCKET PORT
    unshare --net python -m specdeploy_sandbox.loopback_bridge inside SOCKET PORT -- PROGRAM ARGS...
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import signal
import socket
import struct
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

LOOPBACK = "127.0.0.1"
CHUNK = 64 * 1024
# ioctl requests on an interface's flags (linux/sockios.h), and the flag that brings it up.
_GET_FLAGS, _SET_FLAGS, _UP = 0x8913, 0x8914, 0x1
_IFREQ = "16sH14s"
_SET_DEATH_SIGNAL = 1  # prctl PR_SET_PDEATHSIG

Connect = Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


def _relay(connect: Connect) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
    """A server callback that joins each accepted connection to a new one from ``connect``."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await connect()
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))

    return serve


async def outside(socket_path: Path, port: int) -> None:
    """Serve the Unix socket, each connection relayed to the apiserver on loopback."""
    socket_path.unlink(missing_ok=True)
    server = await asyncio.start_unix_server(
        _relay(lambda: asyncio.open_connection(LOOPBACK, port)), path=str(socket_path)
    )
    async with server:
        await server.serve_forever()


def loopback_up() -> None:
    """Bring up ``lo``: a new network namespace starts with it down."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack(_IFREQ, b"lo", 0, b"")
        flags = struct.unpack(_IFREQ, fcntl.ioctl(sock, _GET_FLAGS, request))[1]
        fcntl.ioctl(sock, _SET_FLAGS, struct.pack(_IFREQ, b"lo", flags | _UP, b""))


def _die_with_parent() -> None:
    """In the child: SIGKILL when this bridge dies, so a killed bridge leaves no program behind."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_SET_DEATH_SIGNAL, signal.SIGKILL)


async def inside(socket_path: Path, port: int, argv: list[str]) -> int:
    """Bring the namespace's loopback up, serve PORT on it relayed to the Unix socket, and run
    ``argv`` until it exits (its exit code is returned; SIGTERM and SIGINT are passed on)."""
    loopback_up()
    server = await asyncio.start_server(
        _relay(lambda: asyncio.open_unix_connection(str(socket_path))), LOOPBACK, port
    )
    child = await asyncio.create_subprocess_exec(*argv, preexec_fn=_die_with_parent)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, child.send_signal, signum)
    async with server:
        return await child.wait()


def main(args: list[str]) -> int:
    mode, socket_path, port = args[0], Path(args[1]), int(args[2])
    if mode == "outside":
        asyncio.run(outside(socket_path, port))
        return 0
    if mode == "inside" and args[3:4] == ["--"]:
        return asyncio.run(inside(socket_path, port, args[4:]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

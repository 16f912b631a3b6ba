"""The slice of kubelet's HTTPS API the apiserver calls for ``kubectl logs``.

``GET /containerLogs/{namespace}/{pod}/{container}`` with ``tailLines``, ``limitBytes``,
``previous`` and ``follow`` (``timestamps`` is ignored: the log files carry none). The server
listens on 127.0.0.1 with a self-signed certificate made at start; the sandbox's apiserver has
no ``--kubelet-certificate-authority``, so it does not verify it, and it sends no credentials,
so none are checked.
"""

from __future__ import annotations

import logging
import select
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Protocol

from specdeploy.controller.certs import serving_certificate
from specdeploy_sandbox.enginenode.logs import read_log

FOLLOW_MAX_S = 3600.0
FOLLOW_POLL_S = 0.2
REQUEST_TIMEOUT_S = 30.0

log = logging.getLogger(__name__)


class LogUnavailable(Exception):
    """No log to serve: ``status`` and a kubelet-like message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class LogRef:
    """One container run's log file; ``running`` is true while that run can still write to it."""

    path: Path
    running: Callable[[], bool]


class LogSource(Protocol):
    def container_log(self, namespace: str, pod: str, container: str, previous: bool) -> LogRef:
        """The log of the current (or previous) run; raises LogUnavailable."""
        ...


def _flag(query: dict[str, list[str]], name: str) -> bool:
    return query.get(name, ["false"])[-1].lower() in ("true", "1")


def _int(query: dict[str, list[str]], name: str) -> int | None:
    values = query.get(name)
    return int(values[-1]) if values else None


class _Handler(BaseHTTPRequestHandler):
    server: KubeletServer
    timeout = REQUEST_TIMEOUT_S

    def log_message(self, format: str, *args: object) -> None:
        log.debug("kubelet API: " + format, *args)

    def _error(self, status: int, message: str) -> None:
        body = message.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        parts = url.path.strip("/").split("/")
        if len(parts) != 4 or parts[0] != "containerLogs":
            self._error(404, f"{url.path} is not served by a sandbox engine node")
            return
        query = urllib.parse.parse_qs(url.query)
        try:
            tail, limit = _int(query, "tailLines"), _int(query, "limitBytes")
            ref = self.server.source.container_log(parts[1], parts[2], parts[3], _flag(query, "previous"))
        except ValueError as exc:
            self._error(400, f"invalid query: {exc}")
            return
        except LogUnavailable as exc:
            self._error(exc.status, str(exc))
            return
        follow = _flag(query, "follow") and not _flag(query, "previous")
        data = read_log(ref.path, tail, limit)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        if not follow:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        if follow and (limit is None or len(data) < limit):
            self._follow(ref, ref.path.stat().st_size if ref.path.exists() else 0, limit, len(data))

    def _client_gone(self) -> bool:
        """The client closed the connection (it sends nothing after its request otherwise)."""
        readable, _, _ = select.select([self.connection], [], [], 0)
        if not readable:
            return False
        try:
            return not self.connection.recv(1)
        except (OSError, ssl.SSLError):
            return True

    def _follow(self, ref: LogRef, offset: int, limit: int | None, sent: int) -> None:
        """Stream what the run appends until it ends, the client leaves or FOLLOW_MAX_S pass."""
        deadline = time.monotonic() + FOLLOW_MAX_S
        with ref.path.open("rb") as handle:
            handle.seek(offset)
            while time.monotonic() < deadline and not self._client_gone():
                running = ref.running()
                chunk = handle.read(1 << 16)
                if chunk:
                    if limit is not None:
                        chunk = chunk[: limit - sent]
                    self.wfile.write(chunk)
                    self.wfile.flush()
                    sent += len(chunk)
                    if limit is not None and sent >= limit:
                        return
                    continue
                if not running:
                    return
                time.sleep(FOLLOW_POLL_S)


class KubeletServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, source: LogSource, context: ssl.SSLContext) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.source = source
        # The handshake happens in the request's thread, so a stalled client blocks only itself.
        self.socket = context.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)


def start(port: int, node: str, cert_dir: Path, source: LogSource) -> KubeletServer:
    """Serve on 127.0.0.1:``port`` from a thread, with a fresh certificate for the node."""
    cert = serving_certificate(cert_dir, ["127.0.0.1", node], name=f"{node}-kubelet")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert.cert), str(cert.key))
    server = KubeletServer(port, source, context)
    threading.Thread(target=server.serve_forever, name="kubelet-api", daemon=True).start()
    return server

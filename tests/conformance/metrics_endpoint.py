"""``GET /metrics`` on an engine's own ASGI app, as the operator's reader asks for it.

Imported by ``sglang_metrics.py`` and ``vllm_metrics.py`` inside each engine's venv (a script's
directory is on its ``sys.path``); only the standard library and the engine's starlette are used.
"""

from __future__ import annotations

from typing import Any

# What the operator's aiohttp client sends.
HEADERS = {"Accept": "*/*", "Accept-Encoding": "gzip, deflate"}


def scrape(app: Any) -> str:
    from starlette.testclient import TestClient  # type: ignore[import-not-found]

    response = TestClient(app).get("/metrics", headers=HEADERS, follow_redirects=False)
    assert response.status_code == 200, f"GET /metrics: {response.status_code} {response.text[:500]}"
    text: str = response.text
    return text

"""Render vLLM's ``/metrics`` with vLLM's own spec-decode logger; run by the vLLM venv's interpreter.

The operator reads vLLM's speculative decoding counters from that text
(``specdeploy.acceptance.counters.per_step_counters``), and no vLLM engine runs here without a GPU.
So this builds ``SpecDecodingProm`` with the labels ``PrometheusStatLogger`` gives it (one engine,
index 0) and an n-gram ``SpeculativeConfig`` (no checkpoint needed), feeds it scheduler steps as
``SpecDecodingStats.observe_draft`` counts them, and answers ``GET /metrics`` through vLLM's own
``attach_router`` on a FastAPI app (one API server, so the default registry), as the operator
asks for it (``Accept: */*``, gzip, no redirects).

Reads a JSON job on stdin::

    {"num_speculative_tokens": 3, "steps": [[[3, 2], [3, 0]], [[3, 3]]]}

(each step a list of drafts, each ``[draft tokens, accepted tokens]``) and prints
``RESULT_MARKER`` followed by the exposition text as a JSON string, on one line. Only the
standard library and vLLM are importable here.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from metrics_endpoint import scrape

RESULT_MARKER = "SPECDEPLOY-VLLM-METRICS "
SERVED_MODEL_NAME = "conformance"


def _observe(job: dict[str, Any]) -> None:
    from vllm.config import SpeculativeConfig  # type: ignore[import-not-found]
    from vllm.v1.spec_decode.metrics import (  # type: ignore[import-not-found]
        SpecDecodingProm,
        SpecDecodingStats,
    )

    num_spec_tokens = int(job["num_speculative_tokens"])
    config = SpeculativeConfig(
        method="ngram", num_speculative_tokens=num_spec_tokens, prompt_lookup_max=3, prompt_lookup_min=1
    )
    # As PrometheusStatLogger.__init__ builds it for engine_indexes=[0].
    prom = SpecDecodingProm(config, ["model_name", "engine"], {0: [SERVED_MODEL_NAME, "0"]})
    for step in job["steps"]:
        stats = SpecDecodingStats.new(num_spec_tokens)
        for draft_tokens, accepted in step:
            stats.observe_draft(num_draft_tokens=int(draft_tokens), num_accepted_tokens=int(accepted))
        prom.observe(stats, engine_idx=0)


def _scrape() -> str:
    from fastapi import FastAPI  # type: ignore[import-not-found]
    from vllm.entrypoints.serve.instrumentator.metrics import attach_router  # type: ignore[import-not-found]

    app = FastAPI()
    attach_router(app)
    return scrape(app)


def main() -> None:
    job: dict[str, Any] = json.load(sys.stdin)
    _observe(job)
    print(RESULT_MARKER + json.dumps(_scrape()), flush=True)


if __name__ == "__main__":
    main()

"""What the load Job runs: ``vllm bench serve`` per concurrency against each engine, same prompts.

``vllm bench serve`` is the load generator because it is already in the engine image the
deployment runs (nothing else to pull or pin), speaks the OpenAI API both engines serve, drives a
fixed concurrency with a seeded dataset, and reports exactly the figures compared here (output
tokens per second, TTFT, ITL and TPOT percentiles, completed and failed requests).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

from specdeploy.api import EngineName
from specdeploy.enginefacts import facts_for

SPECULATIVE, BASELINE = "speculative", "baseline"
PERCENTILES = "50,99"


@dataclass(frozen=True)
class Load:
    """The traffic of one benchmark, the same for both engines.

    ``prompts`` per concurrency level; ``input_len``/``output_len`` in tokens (every request
    generates exactly ``output_len``: ``--ignore-eos``); ``dataset`` is a ``vllm bench serve``
    dataset name (``random`` needs no file), ``dataset_path`` its file or hub id.
    """

    concurrencies: tuple[int, ...]
    prompts: int
    input_len: int
    output_len: int
    dataset: str = "random"
    dataset_path: str | None = None
    seed: int = 0
    temperature: float = 0.0

    def describe(self) -> dict[str, object]:
        """The load as the report and the summary annotation show it."""
        return {
            "concurrency": list(self.concurrencies), "prompts": self.prompts, "inputLen": self.input_len,
            "outputLen": self.output_len, "dataset": self.dataset, "seed": self.seed,
            "temperature": self.temperature,
        }  # fmt: skip

    def argv(self, base_url: str, model: str, tokenizer: str, concurrency: int) -> list[str]:
        """One ``vllm bench serve`` of ``model`` at ``concurrency``, warmed up by one wave of
        requests; ``tokenizer`` (the verifier's) builds and counts the prompts."""
        argv = [
            "vllm", "bench", "serve",
            "--backend", "openai", "--base-url", base_url, "--endpoint", "/v1/completions",
            "--model", model, "--tokenizer", tokenizer,
            "--dataset-name", self.dataset,
            "--input-len", str(self.input_len), "--output-len", str(self.output_len), "--ignore-eos",
            "--num-prompts", str(self.prompts), "--max-concurrency", str(concurrency),
            "--num-warmups", str(concurrency),
            "--seed", str(self.seed), "--temperature", str(self.temperature),
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", PERCENTILES,
            "--disable-tqdm",
        ]  # fmt: skip
        if self.dataset_path:
            argv += ["--dataset-path", self.dataset_path]
        return argv


def plan(
    load: Load, engine: EngineName, model: str, tokenizer: str, speculative_url: str, baseline_url: str
) -> dict[str, object]:
    """The driver's input: per concurrency the baseline, then the speculative engine (whose
    /metrics are read around its run for acceptance), in the order given."""
    steps = []
    for concurrency in load.concurrencies:
        for target, url in ((BASELINE, baseline_url), (SPECULATIVE, speculative_url)):
            step: dict[str, object] = {
                "target": target,
                "concurrency": concurrency,
                "healthUrl": f"{url}/health",
                "argv": load.argv(url, model, tokenizer, concurrency),
            }
            if target == SPECULATIVE:
                step["metricsUrl"] = f"{url}/metrics"
            steps.append(step)
    return {"steps": steps, "metricPrefixes": list(facts_for(engine).metrics.families)}


def command(driver_plan: dict[str, object]) -> list[str]:
    """The load container's argv: the image's Python running the driver on the plan."""
    source = resources.files("specdeploy.speedup").joinpath("driver.py").read_text()
    return ["python3", "-c", source, json.dumps(driver_plan, separators=(",", ":"))]

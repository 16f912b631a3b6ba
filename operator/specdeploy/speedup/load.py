"""What the load Job runs: ``vllm bench serve`` per concurrency against each engine, same prompts.

``vllm bench serve`` is the load generator because it is already in the engine image the
deployment runs (nothing else to pull or pin), speaks the OpenAI API both engines serve, drives a
fixed concurrency with a seeded dataset, and reports exactly the figures compared here (output
tokens per second, TTFT, ITL and TPOT percentiles, completed and failed requests).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from importlib import resources
from typing import Final, Literal, TypeAlias

from specdeploy.api import EngineName
from specdeploy.enginefacts import facts_for

SPECULATIVE, BASELINE = "speculative", "baseline"
# The engine copy with the draft loaded and drafting 0 tokens at every batch size (``--tokens
# idle``): what a 0 range beside ranges that draft costs.
IDLE: Final = "idle"
# What an engine copy of ``--tokens`` runs: a draft length at every batch size, or the idle draft.
Variant: TypeAlias = int | Literal["idle"]
PERCENTILES = "50,99"
# Tokens per prompt and per completion when not given: a chat turn of moderate length. A pair
# whose context is shorter gets both halved together until one request fits (``fit``).
DEFAULT_INPUT_LEN = 512
DEFAULT_OUTPUT_LEN = 256


@dataclass(frozen=True)
class Load:
    """The traffic of one benchmark, the same for both engines.

    ``prompts`` per concurrency level; ``input_len``/``output_len`` in tokens (every request
    generates exactly ``output_len``: ``--ignore-eos``), None until ``fit`` gives them the
    defaults that suit the resource's context; ``dataset`` is a ``vllm bench serve``
    dataset name (``random`` needs no file), ``dataset_path`` its file or hub id; ``repeats``
    how many times each engine runs at each concurrency (the results keep the median); ``waves``
    the fewest full batches a run sends at any concurrency (``prompts_at``).
    """

    concurrencies: tuple[int, ...]
    prompts: int
    input_len: int | None = None
    output_len: int | None = None
    dataset: str = "random"
    dataset_path: str | None = None
    seed: int = 0
    temperature: float = 0.0
    repeats: int = 1
    waves: int = 0

    def prompts_at(self, concurrency: int) -> int:
        """Requests per run at ``concurrency``: ``prompts``, or ``waves`` times the concurrency
        when that is more. With a fixed count, a run at high concurrency is a couple of batches
        lasting a second or two, in which the first batch's prefill, the last one's stragglers
        and any pause of the machine weigh as much as the steady state being measured."""
        return max(self.prompts, self.waves * concurrency)

    def fit(self, context: int | None) -> Load:
        """This load with every unset length at its default, those defaults halved together
        until one request fits ``context`` tokens (the resource's maxModelLen, when known); lengths
        the user gave stay as given, for the session to refuse when they do not fit."""
        input_len = self.input_len or DEFAULT_INPUT_LEN
        output_len = self.output_len or DEFAULT_OUTPUT_LEN
        while context and input_len + output_len > context:
            shrinks = [self.input_len is None and input_len > 1, self.output_len is None and output_len > 1]
            if not any(shrinks):
                break
            input_len = max(1, input_len // 2) if shrinks[0] else input_len
            output_len = max(1, output_len // 2) if shrinks[1] else output_len
        return replace(self, input_len=input_len, output_len=output_len)

    def describe(self) -> dict[str, object]:
        """The load as the report and the summary annotation show it."""
        return {
            "concurrency": list(self.concurrencies), "prompts": self.prompts, "inputLen": self.input_len,
            "outputLen": self.output_len, "dataset": self.dataset, "seed": self.seed,
            "temperature": self.temperature, "repeats": self.repeats, "waves": self.waves,
        }  # fmt: skip

    def argv(self, base_url: str, model: str, tokenizer: str, concurrency: int) -> list[str]:
        """One ``vllm bench serve`` of ``model`` at ``concurrency``, warmed up by one wave of
        requests; ``tokenizer`` (the verifier's) builds and counts the prompts."""
        if self.input_len is None or self.output_len is None:
            raise ValueError("the load's lengths are unset: fit it to the resource's context first")
        argv = [
            "vllm", "bench", "serve",
            "--backend", "openai", "--base-url", base_url, "--endpoint", "/v1/completions",
            "--model", model, "--tokenizer", tokenizer,
            "--dataset-name", self.dataset,
            "--input-len", str(self.input_len), "--output-len", str(self.output_len), "--ignore-eos",
            "--num-prompts", str(self.prompts_at(concurrency)), "--max-concurrency", str(concurrency),
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
    """The driver's input: per concurrency the baseline, then the speculative engine."""
    return targets_plan(
        load, engine, model, tokenizer, ((BASELINE, baseline_url), (SPECULATIVE, speculative_url))
    )


def draft_length_target(variant: Variant) -> str:
    """The target name of the engine copy drafting ``variant`` tokens (or idle)."""
    return f"draft-{variant}"


def targets_plan(
    load: Load, engine: EngineName, model: str, tokenizer: str, targets: Sequence[tuple[str, str]]
) -> dict[str, object]:
    """Per concurrency, ``load.repeats`` rounds of every (name, URL) target, each round starting
    one target later than the one before: what drifts during a level (a busy neighbour, a cache
    warming) falls on every target alike instead of on whichever runs first. The /metrics of each
    engine that speculates (every target but the baseline) are read around its runs for acceptance."""
    steps = []
    for concurrency in load.concurrencies:
        for round_ in range(load.repeats):
            first = round_ % len(targets)
            steps += [
                _step(load, model, tokenizer, concurrency, round_, target, url)
                for target, url in (*targets[first:], *targets[:first])
            ]
    return {"steps": steps, "metricPrefixes": list(facts_for(engine).metrics.families)}


def _step(
    load: Load, model: str, tokenizer: str, concurrency: int, round_: int, target: str, url: str
) -> dict[str, object]:
    """One ``vllm bench serve`` of the plan: ``target`` at ``url``, round ``round_`` at ``concurrency``."""
    step: dict[str, object] = {
        "target": target,
        "concurrency": concurrency,
        "round": round_,
        "healthUrl": f"{url}/health",
        "argv": load.argv(url, model, tokenizer, concurrency),
    }
    if target != BASELINE:
        step["metricsUrl"] = f"{url}/metrics"
    return step


def command(driver_plan: dict[str, object]) -> list[str]:
    """The load container's argv: the image's Python running the driver on the plan."""
    source = resources.files("specdeploy.speedup").joinpath("driver.py").read_text()
    return ["python3", "-c", source, json.dumps(driver_plan, separators=(",", ":"))]

"""Rendered commands against the engines' own argument parsers, at the default images' versions.

A misspelled or renamed flag, a JSON the engine reads differently, or an algorithm name the
engine maps elsewhere fails here rather than in a CrashLoopBackOff on a GPU node. Each engine is
imported once per session, in its cached venv, and parses every case below.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from engine_venvs import install_timeout
from specdeploy import api, engines, pipeline, planning
from specdeploy.engines import base as engines_base
from specdeploy.engines import sglang, vllm
from specdeploy.engines.base import OwnedFlag
from specdeploy.modelinfo import ModelResolver
from support.paths import REPO

ParseAll = Callable[[str, list[list[str]]], dict[str, Any]]
EXAMPLE_405B = REPO / "manifests" / "examples" / "llama-3.1-405b-instruct-eagle3.yaml"

# The first run installs the engines (minutes each); later runs reuse the venvs.
pytestmark = pytest.mark.timeout(2 * install_timeout() + 600)

PAIR_000: dict[str, Any] = {
    "verifier": {"model": "Qwen/Qwen3-30B-A3B-Instruct-2507"},
    "speculator": {
        "model": "RedHatAI/Qwen3-30B-A3B-Instruct-2507-speculator.eagle3",
        "numSpeculativeTokens": 3,
    },
    "parallelism": {"tensor": 1},
}
PAIR_003: dict[str, Any] = {
    "verifier": {"model": "Qwen/Qwen3-Coder-30B-A3B-Instruct"},
    "speculator": {
        "model": "sgl-project/SGLang-EAGLE3-Qwen3-Coder-30B-A3B-Instruct",
        "numSpeculativeTokens": 5,
    },
    "parallelism": {"tensor": 8},
}
EVERY_OPTION: dict[str, Any] = {
    "verifier": {"model": "Qwen/Qwen3-30B-A3B-Instruct-2507", "revision": "0123abc"},
    "speculator": {
        "model": "RedHatAI/Qwen3-30B-A3B-Instruct-2507-speculator.eagle3",
        "revision": "main",
        "numSpeculativeTokens": 4,
        "draftTensorParallelSize": 2,
    },
    "parallelism": {"tensor": 2},
    "maxModelLen": 32768,
    "gpuMemoryUtilization": 0.85,
    "servedModelName": "qwen3-a3b",
}

# What LeaderWorkerSet puts in each pod's environment, for the $(VAR) Kubernetes expands in a
# multi-node command: the leader pod's DNS name and the pod's index in its group (a worker's here;
# the leader's command carries its rank literally).
LWS_ENV = {"$(LWS_LEADER_ADDRESS)": "llama-405b-0.llama-405b.default", "$(LWS_WORKER_INDEX)": "1"}
LEADER_HOST = LWS_ENV["$(LWS_LEADER_ADDRESS)"]
# What the engine container's environment holds from spec.engine.apiKeySecretRef: SGLang's
# command refers to it (vLLM reads VLLM_API_KEY itself).
API_KEY = "sk-conformance"
POD_ENV = {**LWS_ENV, f"$({sglang.API_KEY_ENV})": API_KEY}

VALID: dict[str, dict[str, dict[str, Any]]] = {
    "vllm": {
        "seed-000": PAIR_000,
        "multi-node": {**PAIR_000, "parallelism": {"tensor": 8, "pipeline": 2, "nodes": 2}},
        "schedule": {
            **PAIR_000,
            "speculator": {
                **PAIR_000["speculator"],
                "schedule": [
                    {"fromBatch": 1, "toBatch": 2, "tokens": 3},
                    {"fromBatch": 3, "toBatch": 8, "tokens": 1},
                    {"fromBatch": 9, "tokens": 0},
                ],
            },
        },
        "every-option": {
            **EVERY_OPTION,
            "engine": {
                "vllm": {"enableExpertParallel": True, "kvCacheDtype": "fp8"},
                "args": ["--max-num-seqs", "64", "--enable-prefix-caching"],
                "apiKeySecretRef": {"name": "engine-key"},
            },
        },
    },
    "sglang": {
        "seed-003": {**PAIR_003, "engine": {"sglang": {"eagleTopk": 8, "numDraftTokens": 64}}},
        "chain": {**PAIR_000, "engine": {"name": "sglang"}},
        "multi-node": {**PAIR_003, "parallelism": {"tensor": 16, "nodes": 2}},
        "every-option": {
            **EVERY_OPTION,
            "speculator": {**EVERY_OPTION["speculator"], "draftTensorParallelSize": 2},
            "engine": {
                "name": "sglang",
                "sglang": {"numSteps": 6, "eagleTopk": 4, "numDraftTokens": 16, "memFractionStatic": 0.7},
                "args": ["--max-running-requests", "32", "--chunked-prefill-size", "4096"],
                "apiKeySecretRef": {"name": "engine-key"},
            },
        },
    },
}
OWNED: dict[str, tuple[OwnedFlag, ...]] = {"vllm": vllm.OWNED_FLAGS, "sglang": sglang.OWNED_FLAGS}


def spec_of(raw: dict[str, Any], engine: str) -> api.SpeculativeDeploymentSpec:
    engine_section = {"name": engine, **raw.get("engine", {})}
    return api.SpeculativeDeploymentSpec.model_validate({**raw, "engine": engine_section})


def expand(argv: list[str]) -> list[str]:
    """``argv`` as the container runs it: the $(VAR) references Kubernetes expands, expanded."""
    for reference, value in POD_ENV.items():
        argv = [arg.replace(reference, value) for arg in argv]
    return argv


def example_405b_group(engine: str) -> tuple[list[str], list[str]]:
    """The leader's and a worker's command of the LeaderWorkerSet the 405B example renders to
    (through the operator's whole pipeline, on two 8 x H100 nodes) on ``engine``."""
    body: dict[str, Any] = yaml.safe_load(EXAMPLE_405B.read_text())
    body["spec"]["engine"] = {"name": engine}
    body["spec"]["speculator"]["model"] = str(REPO / body["spec"]["speculator"]["model"])
    result = pipeline.compute(body, ModelResolver(), planning.parse_gpus_flag("h100-80gb:8x2"))
    assert result.child("LeaderWorkerSet") is not None, result.message
    group = result.child("LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]
    leader, worker = (group[f"{role}Template"]["spec"]["containers"][0] for role in ("leader", "worker"))
    return leader["command"], worker["command"]


def valid_cases(engine: str) -> Iterator[tuple[str, list[str]]]:
    """Each valid render's command and, on several nodes, ``<name>-worker``: the workers' command;
    then the 405B example's group as the operator renders it."""
    for name, raw in VALID[engine].items():
        launch = engines.render(spec_of(raw, engine))
        yield name, expand(launch.command)
        if launch.worker_command is not None:
            yield f"{name}-worker", expand(launch.worker_command)
    leader, worker = example_405b_group(engine)
    yield "llama-405b", expand(leader)
    yield "llama-405b-worker", expand(worker)


def cases(engine: str) -> Iterator[tuple[str, list[str]]]:
    """Valid renders, then argvs each parser must refuse (a typo, and an unknown user flag)."""
    yield from valid_cases(engine)
    seed = next(iter(VALID[engine].values()))
    seed_command = engines.render(spec_of(seed, engine)).command
    yield "typo", [arg.replace("--speculative-", "--speculativ-") for arg in seed_command]
    unknown = spec_of({**seed, "engine": {**seed.get("engine", {}), "args": ["--no-such-flag", "1"]}}, engine)
    yield "unknown-flag", engines.render(unknown).command


def parse_cases(parse_all: ParseAll, engine: str) -> dict[str, Any]:
    """The engine's options and ``by_case``: name -> (argv, result); one engine process for all."""
    named = dict(cases(engine))
    response = dict(parse_all(engine, list(named.values())))
    response["by_case"] = dict(zip(named, zip(named.values(), response["results"], strict=True), strict=True))
    return response


@pytest.fixture(params=["vllm", "sglang"])
def parsed(request: pytest.FixtureRequest, parse_all: ParseAll) -> tuple[str, dict[str, Any]]:
    engine: str = request.param
    return engine, parse_cases(parse_all, engine)


def flag_tokens(argv: list[str]) -> list[str]:
    """Option names after the program part (``vllm serve MODEL`` / ``python3 -m MODULE``)."""
    return [arg.split("=", 1)[0] for arg in argv[3:] if arg.startswith("-") and not arg[1:2].isdigit()]


def test_every_valid_command_parses_with_exact_flag_names(parsed: tuple[str, dict[str, Any]]) -> None:
    """Exact names: argparse would also accept an abbreviation, which breaks when a flag is added."""
    engine, response = parsed
    options = {name for group in response["options"] for name in group}
    for case, _ in valid_cases(engine):
        argv, result = response["by_case"][case]
        assert result["ok"], f"{engine} {case}: {result['error']}\n{argv}"
        inexact = [flag for flag in flag_tokens(argv) if flag not in options]
        assert inexact == [], f"{engine} {case}: not exact option names of {engine}: {inexact}"


def test_parser_refuses_bad_commands(parsed: tuple[str, dict[str, Any]]) -> None:
    """The check has teeth: a misspelled operator flag and an unknown user flag are both refused."""
    engine, response = parsed
    for case in ("typo", "unknown-flag"):
        _, result = response["by_case"][case]
        assert not result["ok"], f"{engine} accepted the {case} command"
        assert "unrecognized arguments" in result["error"] or "invalid choice" in result["error"]


def test_owned_flags_cover_every_spelling(parsed: tuple[str, dict[str, Any]]) -> None:
    """engine.args validation knows every alias of each flag the operator renders, and no stale name."""
    engine, response = parsed
    groups: list[list[str]] = response["options"]
    options = {name for group in groups for name in group}
    for flag in OWNED[engine]:
        for name in flag.names:
            # A name may be an abbreviation users type (sglang's --tp for --tp-size).
            assert name in options or any(option.startswith(name) for option in options), (
                f"{engine} has no option {name}"
            )
        for group in groups:
            if set(group) & set(flag.names):
                assert set(group) <= set(flag.names), f"{engine}: {flag.names} misses aliases {group}"


def test_vllm_reads_what_was_meant(parse_all: ParseAll) -> None:
    by_case = parse_cases(parse_all, "vllm")["by_case"]
    for name, raw in VALID["vllm"].items():
        spec = spec_of(raw, "vllm")
        values = by_case[name][1]["values"]
        assert spec.verifier is not None
        assert values["model"] == spec.verifier.model, name
        assert values["speculative_config"] == vllm.speculative_config(spec), name
        assert values["tensor_parallel_size"] == spec.parallelism.tensor, name
        assert (values["host"], values["port"]) == ("0.0.0.0", vllm.PORT), name
        assert values["gpu_memory_utilization"] == spec.gpu_memory_utilization, name
        assert values["max_model_len"] == spec.max_model_len, name
        expected_name = [spec.served_model_name] if spec.served_model_name else None
        assert values["served_model_name"] == expected_name, name
        assert values["pipeline_parallel_size"] == engines_base.pipeline_parallel_size(spec), name
        assert values["headless"] is False, name
        assert values["api_key"] is None, name  # the key comes from VLLM_API_KEY, never argv


def test_vllm_multi_node_commands_read_as_one_group(parse_all: ParseAll) -> None:
    """Leader and worker name the same group (size, leader address) and their own ranks; only
    the workers run headless, and both carry the same engine and speculative configuration."""
    by_case = parse_cases(parse_all, "vllm")["by_case"]
    leader, worker = by_case["multi-node"][1]["values"], by_case["multi-node-worker"][1]["values"]
    assert (leader["nnodes"], leader["node_rank"], leader["headless"]) == (2, 0, False)
    assert (worker["nnodes"], worker["node_rank"], worker["headless"]) == (2, 1, True)
    assert leader["master_addr"] == worker["master_addr"] == LEADER_HOST
    assert (leader["tensor_parallel_size"], leader["pipeline_parallel_size"]) == (8, 2)
    same = ("model", "speculative_config", "tensor_parallel_size", "pipeline_parallel_size", "max_model_len")
    assert {k: leader[k] for k in same} == {k: worker[k] for k in same}


def test_vllm_speculative_config_is_the_json_meant(parse_all: ParseAll) -> None:
    """Exactly the intended keys, each a SpeculativeConfig field, and a method vLLM knows.

    vLLM would only notice a misspelled key when it builds the config at startup, on the GPU node.
    """
    response = parse_cases(parse_all, "vllm")
    schema, by_case = response["speculative_config"], response["by_case"]
    seed = by_case["seed-000"][1]["values"]["speculative_config"]
    assert seed == {
        "method": "eagle3",
        "model": "RedHatAI/Qwen3-30B-A3B-Instruct-2507-speculator.eagle3",
        "num_speculative_tokens": 3,
    }
    full = by_case["every-option"][1]["values"]["speculative_config"]
    assert set(full) == {
        "method", "model", "num_speculative_tokens", "revision", "draft_tensor_parallel_size"
    }  # fmt: skip
    assert set(full) <= set(schema["fields"])
    assert full["method"] in schema["methods"]
    scheduled = by_case["schedule"][1]["values"]["speculative_config"]
    assert set(scheduled) - set(seed) == {"num_speculative_tokens_per_batch_size"}
    assert set(scheduled) <= set(schema["fields"])


def test_vllm_runs_the_schedule_meant_at_every_batch_size(parse_all: ParseAll) -> None:
    """vLLM's own expansion of the rendered schedule (what its scheduler looks up per step) gives
    each batch size its range's draft length, the open last range included."""
    result = parse_cases(parse_all, "vllm")["by_case"]["schedule"][1]
    lengths = result["draft_lengths"]
    assert isinstance(lengths, list), lengths
    assert lengths[:2] == [3, 3]
    assert set(lengths[2:8]) == {1}
    assert set(lengths[8:]) == {0} and len(lengths) > 8


def test_sglang_reads_what_was_meant(parse_all: ParseAll) -> None:
    """ServerArgs holds the intended values, and EAGLE3 is SGLang's own EAGLE3 algorithm.

    SGLang does not check --speculative-algorithm at parse time, so the value is looked up in its
    SpeculativeAlgorithm enum here: exactly the EAGLE3 member, not an alias resolved to EAGLE.
    """
    by_case = parse_cases(parse_all, "sglang")["by_case"]
    for name, raw in VALID["sglang"].items():
        spec = spec_of(raw, "sglang")
        result = by_case[name][1]
        values = result["values"]
        steps, topk, draft_tokens = sglang.draft_shape(spec)
        assert spec.verifier is not None and spec.speculator is not None
        assert result["algorithm"] == values["speculative_algorithm"] == sglang.ALGORITHM, name
        assert sglang.ALGORITHM in result["builtin_algorithms"]
        assert values["model_path"] == spec.verifier.model, name
        assert values["revision"] == spec.verifier.revision, name
        assert values["speculative_draft_model_path"] == spec.speculator.model, name
        assert values["speculative_draft_model_revision"] == spec.speculator.revision, name
        shape = (values["speculative_num_steps"], values["speculative_eagle_topk"])
        assert (*shape, values["speculative_num_draft_tokens"]) == (steps, topk, draft_tokens), name
        assert values["tp_size"] == spec.parallelism.tensor, name
        assert (values["host"], values["port"]) == ("0.0.0.0", sglang.PORT), name
        assert values["mem_fraction_static"] == sglang.mem_fraction_static(spec), name
        assert values["context_length"] == spec.max_model_len, name
        assert values["served_model_name"] == spec.served_model_name, name
        assert values["enable_metrics"] is True, name
        assert values["pp_size"] == 1, name
        assert values["api_key"] == (API_KEY if spec.engine.api_key_secret_ref else None), name


def test_sglang_multi_node_commands_read_as_one_group(parse_all: ParseAll) -> None:
    """Every pod of the group runs the same server arguments with its own node rank and the
    leader's process-group address; tensor parallelism spans the nodes."""
    by_case = parse_cases(parse_all, "sglang")["by_case"]
    leader, worker = by_case["multi-node"][1], by_case["multi-node-worker"][1]
    assert worker["ok"], worker["error"]
    lead, work = leader["values"], worker["values"]
    assert (lead["nnodes"], lead["node_rank"]) == (2, 0)
    assert (work["nnodes"], work["node_rank"]) == (2, 1)
    assert lead["dist_init_addr"] == work["dist_init_addr"] == f"{LEADER_HOST}:{sglang.DIST_INIT_PORT}"
    assert lead["tp_size"] == work["tp_size"] == 16
    same = ("model_path", "speculative_algorithm", "speculative_draft_model_path", "speculative_num_steps")
    assert {k: lead[k] for k in same} == {k: work[k] for k in same}


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_405b_examples_group_parses_as_one_group(parse_all: ParseAll, engine: str) -> None:
    """The LeaderWorkerSet the operator renders for Llama-3.1-405B on two H100 nodes: leader and
    worker commands parse, with two nodes, ranks 0 and 1 and one leader address."""
    by_case = parse_cases(parse_all, engine)["by_case"]
    leader, worker = by_case["llama-405b"][1], by_case["llama-405b-worker"][1]
    assert leader["ok"] and worker["ok"], (leader["error"], worker["error"])
    lead, work = leader["values"], worker["values"]
    assert (lead["nnodes"], lead["node_rank"], work["nnodes"], work["node_rank"]) == (2, 0, 2, 1)
    if engine == "vllm":
        assert (lead["tensor_parallel_size"], lead["pipeline_parallel_size"]) == (8, 2)
        assert lead["master_addr"] == work["master_addr"] == LEADER_HOST and work["headless"]
    else:
        assert (lead["tp_size"], lead["pp_size"]) == (16, 1)
        assert lead["dist_init_addr"] == work["dist_init_addr"] == f"{LEADER_HOST}:{sglang.DIST_INIT_PORT}"

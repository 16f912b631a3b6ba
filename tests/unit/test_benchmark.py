"""The A/B benchmark's pure parts: the baseline command and objects, the load, the comparison."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from specdeploy import api, engines
from specdeploy.adaptive import costs
from specdeploy.children.labels import owner_reference
from specdeploy.cli.bench import _draft_lengths, _levels
from specdeploy.engines import vllm
from specdeploy.speedup import load, manifests, report, results
from specdeploy.speedup.driver import MARK
from test_engine_render import SEED_000, SEED_003, spec_of

GOLDEN = Path(__file__).parent / "golden" / "manifests"
RESOURCE = {
    "apiVersion": "specdeploy.io/v1alpha1",
    "kind": "SpeculativeDeployment",
    "metadata": {"name": "qwen3-30b-a3b-eagle3", "namespace": "default", "uid": "sd-uid"},
}
RUN = {"metadata": {"name": "qwen3-30b-a3b-eagle3-bench", "uid": "run-uid"}}


def _golden(name: str, kind: str) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all((GOLDEN / f"{name}.yaml").read_text()) if d]
    found: dict[str, Any] = next(d for d in docs if d["kind"] == kind)
    return found


def _engine_container(deployment: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return found


def test_vllm_baseline_drops_only_the_speculative_config() -> None:
    command = engines.render(spec_of(SEED_000)).command
    baseline = engines.engine_for("vllm").baseline_command(command)
    at = command.index("--speculative-config")
    assert baseline == command[:at] + command[at + 2 :]
    assert not any("speculative" in arg for arg in baseline)


def test_vllm_baseline_drops_every_spelling_of_speculation() -> None:
    command = [
        "vllm",
        "serve",
        "m",
        "--speculative_config={}",
        "-sc",
        "{}",
        "--dtype",
        "float32",
        "--enforce-eager",
    ]
    assert engines.engine_for("vllm").baseline_command(command) == [
        "vllm", "serve", "m", "--dtype", "float32", "--enforce-eager",
    ]  # fmt: skip


def test_sglang_baseline_keeps_the_verifier_and_its_memory() -> None:
    command = engines.render(spec_of(SEED_003)).command
    baseline = engines.engine_for("sglang").baseline_command(command)
    assert not [arg for arg in baseline if arg.startswith("--speculative")]
    assert "EAGLE3" not in baseline
    for flag in ("--model-path", "--tp-size", "--mem-fraction-static", "--port"):
        assert baseline[baseline.index(flag) + 1] == command[command.index(flag) + 1]
    assert "--enable-metrics" in baseline


def test_baseline_is_the_running_template_without_speculation() -> None:
    speculative = _golden("qwen3-30b-a3b-instruct-2507-eagle3", "Deployment")
    before = copy.deepcopy(speculative)
    owner = manifests.job_owner(RUN)
    deployment, service = manifests.baseline(speculative, "qwen3-30b-a3b-eagle3", owner)
    assert speculative == before, "the live Deployment is not modified"

    assert deployment["metadata"]["name"] == "qwen3-30b-a3b-eagle3-baseline"
    assert deployment["metadata"]["ownerReferences"] == [owner]
    assert deployment["spec"]["replicas"] == 1
    spec_container, base_container = _engine_container(speculative), _engine_container(deployment)
    assert base_container["command"] == engines.engine_for("vllm").baseline_command(spec_container["command"])
    for same in ("image", "resources", "env", "ports", "readinessProbe"):
        assert base_container.get(same) == spec_container.get(same), same
    spec_pod, base_pod = speculative["spec"]["template"]["spec"], deployment["spec"]["template"]["spec"]
    for same in ("affinity", "tolerations", "volumes"):
        assert base_pod.get(same) == spec_pod.get(same), same

    # Neither the operator's watches nor the speculative Service select the baseline's pods.
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/managed-by"] == "specdeploy-bench"
    assert labels[manifests.BENCHMARK_OF_LABEL] == "qwen3-30b-a3b-eagle3"
    spec_selector = speculative["spec"]["selector"]["matchLabels"]
    assert not all(labels.get(k) == v for k, v in spec_selector.items())
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert all(labels[k] == v for k, v in service["spec"]["selector"].items())
    assert service["spec"]["ports"][0]["port"] == 8000


def test_template_hash_follows_the_template() -> None:
    speculative = _golden("qwen3-30b-a3b-instruct-2507-eagle3", "Deployment")
    owner = manifests.job_owner(RUN)
    first, _ = manifests.baseline(speculative, "x", owner)
    again, _ = manifests.baseline(
        speculative, "x", manifests.job_owner({"metadata": {"name": "o", "uid": "2"}})
    )
    changed = copy.deepcopy(speculative)
    _engine_container(changed)["image"] = "vllm/vllm-openai:v0.34.0"
    other, _ = manifests.baseline(changed, "x", owner)
    key = manifests.TEMPLATE_HASH_ANNOTATION
    assert first["metadata"]["annotations"][key] == again["metadata"]["annotations"][key]
    assert first["metadata"]["annotations"][key] != other["metadata"]["annotations"][key]


def test_a_kept_baseline_of_the_same_pod_serves_another_resource() -> None:
    """Two resources of one verifier (drafts differ): their baselines run the same pod, so one
    kept baseline serves both; a baseline of a run (owned by its Job) or of another pod does not."""
    speculative = _golden("qwen3-30b-a3b-instruct-2507-eagle3", "Deployment")
    kept, _ = manifests.baseline(speculative, "draft-a", owner_reference(RESOURCE))
    wanted, _ = manifests.baseline(speculative, "draft-b", manifests.job_owner(RUN))
    key = manifests.TEMPLATE_HASH_ANNOTATION
    hashed = wanted["metadata"]["annotations"][key]
    assert kept["metadata"]["annotations"][key] == hashed
    assert manifests.kept_baseline_like([kept], hashed) is kept

    running, _ = manifests.baseline(speculative, "draft-a", manifests.job_owner(RUN))
    changed = copy.deepcopy(speculative)
    _engine_container(changed)["image"] = "vllm/vllm-openai:v0.34.0"
    other, _ = manifests.baseline(changed, "draft-c", owner_reference(RESOURCE))
    going = copy.deepcopy(kept)
    going["metadata"]["deletionTimestamp"] = "2026-12-04T00:00:00Z"
    assert manifests.kept_baseline_like([running, other, going], hashed) is None


def test_names_fit_a_dns_label() -> None:
    long = "a" * 63
    names = {manifests.run_name(long), manifests.baseline_name(long), manifests.load_name(long)}
    assert len(names) == 3 and all(len(n) <= 63 for n in names)
    assert manifests.baseline_name(long).endswith("-baseline")
    assert manifests.baseline_name("b" * 63) != manifests.baseline_name(long)
    assert manifests.run_name("short") == "short-bench"


def test_run_job_runs_nothing_and_expires() -> None:
    job = manifests.run_job(RESOURCE, "vllm/vllm-openai:v0.33.0", 900)
    spec = job["spec"]
    assert (spec["parallelism"], spec["activeDeadlineSeconds"]) == (0, 900)
    assert spec["ttlSecondsAfterFinished"] == manifests.FINISHED_TTL_S
    assert job["metadata"]["ownerReferences"][0]["uid"] == "sd-uid"


def test_load_job_is_placed_like_the_engines_without_their_gpus() -> None:
    speculative = _golden("qwen3-30b-a3b-instruct-2507-eagle3", "Deployment")
    _engine_container(speculative)["env"] = [
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
        {"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"},
    ]
    job = manifests.load_job(speculative, "q", manifests.job_owner(RUN), "img", ["python3", "-c", "x"], 600)
    pod = job["spec"]["template"]["spec"]
    spec_pod = speculative["spec"]["template"]["spec"]
    assert pod["affinity"] == spec_pod["affinity"] and pod["tolerations"] == spec_pod["tolerations"]
    container = pod["containers"][0]
    assert "nvidia.com/gpu" not in json.dumps(container["resources"])
    assert [e["name"] for e in container["env"]] == ["HF_TOKEN"]
    assert (pod["restartPolicy"], job["spec"]["backoffLimit"], job["spec"]["activeDeadlineSeconds"]) == (
        "Never", 0, 600,
    )  # fmt: skip
    assert job["metadata"]["ownerReferences"] == [manifests.job_owner(RUN)]


def test_load_job_sends_the_engines_api_key_from_the_same_secret() -> None:
    """``vllm bench serve`` sends OPENAI_API_KEY as its bearer token; the driver's /health and
    /metrics reads need none (neither engine guards them)."""
    speculative = _golden("qwen3-30b-a3b-instruct-2507-eagle3", "Deployment")
    key = {"secretKeyRef": {"name": "engine-key", "key": "apiKey"}}
    _engine_container(speculative)["env"] = [{"name": "VLLM_API_KEY", "valueFrom": key}]
    job = manifests.load_job(speculative, "q", manifests.job_owner(RUN), "img", ["python3"], 600)
    assert job["spec"]["template"]["spec"]["containers"][0]["env"] == [
        {"name": "OPENAI_API_KEY", "valueFrom": key}
    ]
    _engine_container(speculative)["env"] = []
    job = manifests.load_job(speculative, "q", manifests.job_owner(RUN), "img", ["python3"], 600)
    assert "env" not in job["spec"]["template"]["spec"]["containers"][0]


LOAD = load.Load(concurrencies=(1, 4), prompts=8, input_len=32, output_len=64, seed=7)


@pytest.mark.parametrize(
    ("given", "context", "fitted"),
    [
        ((None, None), None, (512, 256)),  # context unknown: the defaults
        ((None, None), 4096, (512, 256)),
        ((None, None), 768, (512, 256)),
        ((None, None), 512, (256, 128)),  # the sandbox's tiny pair
        ((None, None), 100, (64, 32)),
        ((None, 64), 512, (256, 64)),  # a given length stays; the default one shrinks
        ((448, None), 512, (448, 64)),
        ((500, 64), 512, (500, 64)),  # both given: as given, refused later
    ],
)
def test_unset_lengths_default_to_what_fits_the_context(
    given: tuple[int | None, int | None], context: int | None, fitted: tuple[int, int]
) -> None:
    asked = load.Load(concurrencies=(1,), prompts=8, input_len=given[0], output_len=given[1])
    done = asked.fit(context)
    assert (done.input_len, done.output_len) == fitted


def test_a_load_without_lengths_renders_no_argv() -> None:
    with pytest.raises(ValueError, match="fit it to the resource's context first"):
        load.Load(concurrencies=(1,), prompts=8).argv("http://x", "m", "m", 1)


def _flag(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_same_load_for_both_engines_in_order() -> None:
    plan = load.plan(LOAD, "vllm", "m", "org/m", "http://10.0.0.1:8000", "http://10.0.0.2:8000")
    steps: list[dict[str, Any]] = plan["steps"]  # type: ignore[assignment]
    assert [(s["target"], s["concurrency"]) for s in steps] == [
        ("baseline", 1), ("speculative", 1), ("baseline", 4), ("speculative", 4),
    ]  # fmt: skip
    base, spec = steps[0]["argv"], steps[1]["argv"]
    assert [a for a in base if "10.0.0" not in a] == [a for a in spec if "10.0.0" not in a]
    assert _flag(spec, "--base-url") == "http://10.0.0.1:8000"
    assert (_flag(spec, "--max-concurrency"), _flag(spec, "--num-prompts"), _flag(spec, "--seed")) == (
        "1",
        "8",
        "7",
    )
    assert "--ignore-eos" in spec and _flag(spec, "--temperature") == "0.0"
    assert (_flag(spec, "--model"), _flag(spec, "--tokenizer")) == ("m", "org/m")
    assert LOAD.describe()["concurrency"] == [1, 4] and LOAD.describe()["outputLen"] == 64
    assert "metricsUrl" not in steps[0] and steps[1]["metricsUrl"] == "http://10.0.0.1:8000/metrics"
    assert plan["metricPrefixes"] == ["vllm:spec_decode_num_"]


def test_repeats_take_each_engine_in_turn_each_round_starting_with_the_next() -> None:
    repeated = dataclasses.replace(LOAD, concurrencies=(4,), repeats=4)
    targets = (("baseline", "http://b:1"), ("speculative", "http://s:1"), ("draft-1", "http://d:1"))
    plan = load.targets_plan(repeated, "vllm", "m", "org/m", targets)
    steps: list[dict[str, Any]] = plan["steps"]  # type: ignore[assignment]
    order = [(s["round"], s["target"]) for s in steps]
    assert order == [
        (0, "baseline"), (0, "speculative"), (0, "draft-1"),
        (1, "speculative"), (1, "draft-1"), (1, "baseline"),
        (2, "draft-1"), (2, "baseline"), (2, "speculative"),
        (3, "baseline"), (3, "speculative"), (3, "draft-1"),
    ]  # fmt: skip
    assert {_flag(s["argv"], "--base-url") for s in steps if s["target"] == "draft-1"} == {"http://d:1"}
    assert repeated.describe()["repeats"] == 4


def test_waves_lengthen_the_runs_at_high_concurrency_only() -> None:
    waved = dataclasses.replace(LOAD, concurrencies=(1, 4, 16), prompts=32, waves=4)
    plan = load.targets_plan(waved, "vllm", "m", "org/m", (("baseline", "http://b:1"),))
    steps: list[dict[str, Any]] = plan["steps"]  # type: ignore[assignment]
    assert [_flag(s["argv"], "--num-prompts") for s in steps] == ["32", "32", "64"]
    assert [waved.prompts_at(c) for c in (1, 8, 9)] == [32, 32, 36]
    assert LOAD.prompts_at(16) == LOAD.prompts and waved.describe()["waves"] == 4


def _record(target: str, round_: int, result: dict[str, Any], **counters: str) -> str:
    return MARK + json.dumps(
        {"target": target, "concurrency": 1, "round": round_, "result": result, **counters}
    )


def test_repeated_runs_give_the_median_every_sample_and_the_acceptance_over_all() -> None:
    counted = [(10, 30, 27, [10, 9, 8]), (60, 180, 150, [60, 50, 40]), (110, 330, 297, [110, 99, 88])]
    lines = []
    for round_, (base, spec) in enumerate([(40.0, 90.0), (30.0, 130.0)]):
        lines.append(_record("baseline", round_, _result(base, ttft=10.0 * (round_ + 1))))
        before, after = _exposition(*counted[round_]), _exposition(*counted[round_ + 1])
        lines.append(_record("speculative", round_, _result(spec), before=before, after=after))
    lines.append(_record("baseline", 2, _result(35.0)))
    comparison = results.compare("\n".join(lines), "vllm", (1,))
    level = comparison.results[0]
    assert level.baseline.samples == [40.0, 30.0, 35.0] and level.baseline.output_tokens_per_second == 35.0
    assert level.speculative.output_tokens_per_second == 110.0 and level.speculative.samples == [90.0, 130.0]
    assert level.baseline.ttft_ms.p50 == 20.0 and level.baseline.completed == 24
    assert level.speedup == round(110 / 35, 3)
    # From before the first run to after the last: 100 steps, 270 of 300 draft tokens kept.
    assert level.acceptance is not None and level.acceptance.draft_tokens == 300
    assert level.acceptance.per_position == [1.0, 0.9, 0.8]
    # 90 and 130 around 110: the widest spread, 18%, in the table's line under the verdict.
    assert "median of 2 runs; one engine's runs at one concurrency lie within 18% of it." in report.table(
        comparison
    )
    assert report.spread_line(results.verdict(_levels_with({1: 1.0}))) is None


def test_load_command_runs_the_driver_on_the_plan() -> None:
    plan = load.plan(LOAD, "sglang", "m", "org/m", "http://a:1", "http://b:1")
    argv = load.command(plan)
    assert argv[:2] == ["python3", "-c"] and "def main(" in argv[2]
    assert json.loads(argv[3]) == plan
    assert "$(" not in argv[2], "Kubernetes would expand $(VAR) in a container's command"


def _exposition(drafts: int, draft_tokens: int, accepted: int, per_pos: list[int]) -> str:
    lines = [
        "# TYPE vllm:spec_decode_num_drafts counter",
        f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {drafts}',
        "# TYPE vllm:spec_decode_num_draft_tokens counter",
        f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {draft_tokens}',
        "# TYPE vllm:spec_decode_num_accepted_tokens counter",
        f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {accepted}',
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter",
    ]
    lines += [
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="{i}"}} {v}'
        for i, v in enumerate(per_pos)
    ]
    return "\n".join(lines)


def _result(throughput: float, ttft: float = 20.0, itl: float = 10.0) -> dict[str, Any]:
    return {
        "completed": 8, "failed": 0, "output_throughput": throughput,
        "median_ttft_ms": ttft, "p50_ttft_ms": ttft, "p99_ttft_ms": ttft * 2,
        "median_itl_ms": itl, "p50_itl_ms": itl, "p99_itl_ms": itl * 3,
        "median_tpot_ms": itl, "p50_tpot_ms": itl, "p99_tpot_ms": itl * 2,
    }  # fmt: skip


def _log(throughputs: dict[tuple[str, int], float]) -> str:
    lines = ["INFO some engine output", "specdeploy-bench: baseline at concurrency 1"]
    for (target, concurrency), value in throughputs.items():
        record: dict[str, Any] = {"target": target, "concurrency": concurrency, "result": _result(value)}
        if target == "speculative":
            record["before"] = _exposition(10, 30, 27, [10, 9, 8])
            record["after"] = _exposition(110, 330, 297, [110, 99, 88])
        lines.append(MARK + json.dumps(record))
    return "\n".join(lines)


def test_comparison_from_the_log() -> None:
    log = _log(
        {("baseline", 1): 34.0, ("speculative", 1): 101.0, ("baseline", 4): 433.0, ("speculative", 4): 507.0}
    )
    comparison = results.compare(log, "vllm", (1, 4))
    first = comparison.results[0]
    assert (first.concurrency, first.speedup) == (1, round(101 / 34, 3))
    assert first.speculative.output_tokens_per_second == 101.0
    assert (first.speculative.itl_ms.p50, first.speculative.itl_ms.p99) == (10.0, 30.0)
    assert first.acceptance is not None
    # 300 proposed, 270 kept in 100 steps: 0.9 and 3.7 tokens per step; per position 1, .9, .8.
    assert (first.acceptance.rate, first.acceptance.mean_length, first.acceptance.draft_tokens) == (
        0.9,
        3.7,
        300,
    )
    assert first.acceptance.per_position == [1.0, 0.9, 0.8]
    assert (comparison.pays_at, comparison.stops_paying_above) == ([1, 4], None)
    body = comparison.to_json()
    assert body["results"][0]["speculative"]["outputTokensPerSecond"] == 101.0
    assert body["results"][0]["baseline"]["ttftMs"] == {"p50": 20.0, "p99": 40.0}
    assert body["stopsPayingAbove"] is None and body["paysAt"] == [1, 4]


def test_a_missing_run_is_an_error() -> None:
    log = _log({("baseline", 1): 34.0, ("speculative", 1): 101.0, ("baseline", 4): 433.0})
    with pytest.raises(results.ResultsError, match="speculative result at concurrency 4"):
        results.compare(log, "vllm", (1, 4))


def _levels_with(speedups: dict[int, float]) -> list[results.Level]:
    figures = results.figures([{"result": _result(100.0)}])
    return [
        results.Level(concurrency=c, speculative=figures, baseline=figures, speedup=s, acceptance=None)
        for c, s in speedups.items()
    ]


@pytest.mark.parametrize(
    ("speedups", "pays_at", "stops"),
    [
        ({1: 2.9, 4: 1.6, 16: 1.1}, [1, 4, 16], None),
        ({16: 0.9, 1: 2.9, 4: 1.2}, [1, 4], 4),
        ({1: 0.8, 4: 0.7}, [], 0),
        ({1: 1.5, 4: 1.0, 16: 1.05}, [1, 16], 1),
    ],
)
def test_where_speculation_stops_paying(
    speedups: dict[int, float], pays_at: list[int], stops: int | None
) -> None:
    comparison = results.verdict(_levels_with(speedups))
    assert [level.concurrency for level in comparison.results] == sorted(speedups)
    assert (comparison.pays_at, comparison.stops_paying_above) == (pays_at, stops)


def test_report_table_summary_and_event() -> None:
    paying = results.verdict(_levels_with({1: 2.9, 4: 1.2, 16: 0.9}))
    table = report.table(paying)
    assert table.splitlines()[0].split()[:3] == ["CONCURRENCY", "SPEC", "TOK/S"]
    assert "2.90x" in table and "0.90x" in table
    assert table.endswith("Speculation pays up to concurrency 4 and stops paying above it.")
    summary = json.loads(report.summary(paying, results_time(), {"outputLen": 64}, "abc"))
    assert summary["speedup"] == {"1": 2.9, "4": 1.2, "16": 0.9} and summary["stopsPayingAbove"] == 4
    assert len(report.summary(paying, results_time(), {"outputLen": 64}, "abc")) < 1024
    assert report.event(paying)[:2] == ("Normal", report.BENCHMARKED)
    losing = results.verdict(_levels_with({1: 0.8}))
    kind, reason, message = report.event(losing)
    assert (kind, reason) == ("Warning", report.NOT_PAYING)
    assert "0.80x at concurrency 1" in message and "does not pay" in message


def results_time() -> Any:
    from datetime import UTC, datetime

    return datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def test_plot_is_written(tmp_path: Path) -> None:
    from specdeploy.speedup.plot import plot

    comparison = results.verdict(_levels_with({1: 2.9, 4: 1.2, 16: 0.9}))
    path = tmp_path / "out" / "bench.png"
    plot(comparison, "title", path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
    # Repeats draw their spread: a plot that differs from the one of single runs.
    repeated = results.figures([{"result": _result(60.0)}, {"result": _result(140.0)}])

    def measured(figures: results.Figures) -> results.Comparison:
        levels = [level.model_copy(update={"speculative": figures}) for level in comparison.results]
        return comparison.model_copy(update={"results": levels})

    plot(measured(repeated), "title", tmp_path / "spread.png")
    plot(measured(repeated.model_copy(update={"samples": [100.0]})), "title", tmp_path / "single.png")
    assert (tmp_path / "spread.png").read_bytes() != (tmp_path / "single.png").read_bytes()


def test_concurrency_levels() -> None:
    assert _levels("16,1,4,4") == (1, 4, 16)
    for bad in ("0", "a", "", "1,-2"):
        with pytest.raises(Exception, match=r"."):
            _levels(bad)


SCHEDULED = {
    "verifier": {"model": "Qwen/Qwen3-30B-A3B-Instruct-2507"},
    "speculator": {
        "model": "RedHatAI/Qwen3-30B-A3B-Instruct-2507-speculator.eagle3",
        "numSpeculativeTokens": 3,
        "schedule": [{"fromBatch": 1, "toBatch": 4, "tokens": 3}, {"fromBatch": 5, "tokens": 0}],
    },
    "parallelism": {"tensor": 1},
}


def test_vllm_draft_length_command_drafts_that_many_at_every_batch_size() -> None:
    command = engines.render(api.SpeculativeDeploymentSpec.model_validate(SCHEDULED)).command
    changed = engines.engine_for("vllm").draft_length_command(command, 1)
    config = vllm.running_config(changed)
    assert config is not None
    assert config["num_speculative_tokens"] == 1 and vllm.SCHEDULE_KEY not in config
    assert config["model"] == SCHEDULED["speculator"]["model"]
    at = command.index(vllm.SPECULATIVE_CONFIG) + 1
    assert changed[:at] + changed[at + 1 :] == command[:at] + command[at + 1 :]
    with pytest.raises(ValueError, match="SGLang"):
        engines.engine_for("sglang").draft_length_command(command, 1)


def test_a_draft_length_copy_is_the_baseline_pod_with_that_length() -> None:
    deployment = _golden("qwen3-30b-a3b-instruct-2507-eagle3", "Deployment")
    owner = manifests.job_owner(RUN)
    draft, service = manifests.draft_length(deployment, "qwen", owner, 2)
    base, _ = manifests.baseline(deployment, "qwen", owner)
    assert draft["metadata"]["name"] == "qwen-draft2" == service["metadata"]["name"]
    assert draft["metadata"]["ownerReferences"] == [owner]
    engine = _engine_container(draft)
    config = vllm.running_config(engine["command"])
    assert config is not None and config["num_speculative_tokens"] == 2
    assert draft["spec"]["selector"] != base["spec"]["selector"]
    assert service["spec"]["selector"] == draft["spec"]["selector"]["matchLabels"]
    assert engine["resources"] == _engine_container(base)["resources"]


def test_draft_lengths_of_the_command_line() -> None:
    assert _draft_lengths("3,0,idle,1,1") == (0, 1, 3, "idle")
    assert _draft_lengths("0,2") == (0, 2)
    for bad in ("idle", "x", "-1", "0,99"):
        with pytest.raises(Exception, match=r"draft lengths"):
            _draft_lengths(bad)


def test_the_idle_draft_copy_loads_the_draft_and_drafts_nothing() -> None:
    """What a 0 beside ranges that draft runs: the same config, 0 at every batch size."""
    deployment = _golden("qwen3-30b-a3b-instruct-2507-eagle3", "Deployment")
    idle, service = manifests.draft_length(deployment, "qwen", manifests.job_owner(RUN), "idle")
    assert idle["metadata"]["name"] == "qwen-draft-idle" == service["metadata"]["name"]
    config = vllm.running_config(_engine_container(idle)["command"])
    running = vllm.running_config(_engine_container(deployment)["command"])
    assert config is not None and running is not None
    assert config == {**running, vllm.SCHEDULE_KEY: [[1, api.MAX_BATCH_SIZE, 0]]}
    command = _engine_container(deployment)["command"]
    with pytest.raises(ValueError, match="SGLang"):
        engines.engine_for("sglang").idle_draft_command(command)
    with pytest.raises(ValueError, match="no --speculative-config"):
        engines.engine_for("vllm").idle_draft_command(vllm.VllmEngine().baseline_command(command))


def test_the_idle_draft_is_measured_against_the_same_baseline_and_kept_for_the_operator() -> None:
    log = _log(
        {("baseline", 1): 50.0, ("speculative", 1): 100.0, ("baseline", 4): 400.0, ("speculative", 4): 300.0}
    )
    logs: dict[load.Variant, str | None] = {0: None, 3: None, "idle": _draft_log("idle", {1: 45.0, 4: 380.0})}
    measured = results.with_draft_lengths(results.compare(log, "vllm", (1, 4)), logs, "vllm")
    assert measured.idle_draft is not None
    assert [(r.output_tokens_per_second, r.speedup) for r in measured.idle_draft] == [
        (45.0, 0.9),
        (380.0, 0.95),
    ]
    assert [length.tokens for length in measured.draft_lengths] == [0, 3]
    body = json.loads(report.summary(measured, results_time(), {}, "abc"))
    assert body["idleDraft"] == {
        "outputTokensPerSecond": {"1": 45.0, "4": 380.0},
        "spread": {"1": 0.0, "4": 0.0},
    }
    curve = costs.parse(json.dumps(body))
    assert curve is not None and curve.idle == (45.0, 380.0) and curve.idle_spread == (0.0, 0.0)
    assert "K=0, DRAFT IDLE" in report.table(measured) and "380.0 (0.95x)" in report.table(measured)
    without = {k: v for k, v in body.items() if k != "idleDraft"}
    assert (curve := costs.parse(json.dumps(without))) is not None and curve.idle is None


def _draft_log(tokens: load.Variant, throughputs: dict[int, float]) -> str:
    lines = []
    for concurrency, value in throughputs.items():
        record: dict[str, Any] = {
            "target": load.draft_length_target(tokens),
            "concurrency": concurrency,
            "result": _result(value),
            "before": _exposition(10, 30, 27, [10, 9, 8]),
            "after": _exposition(60, 80, 67, [50, 9, 8]),
        }
        lines.append(MARK + json.dumps(record))
    return "\n".join(lines)


def test_draft_lengths_against_the_same_baseline() -> None:
    """0 is the baseline, the resource's own length comes from its runs, others from their copy's log."""
    log = _log(
        {("baseline", 1): 50.0, ("speculative", 1): 100.0, ("baseline", 4): 400.0, ("speculative", 4): 300.0}
    )
    comparison = results.compare(log, "vllm", (1, 4))
    measured = results.with_draft_lengths(
        comparison, {0: None, 1: _draft_log(1, {1: 75.0, 4: 420.0}), 3: None}, "vllm"
    )
    by_tokens = {length.tokens: length for length in measured.draft_lengths}
    assert [r.output_tokens_per_second for r in by_tokens[0].results] == [50.0, 400.0]
    assert [r.speedup for r in by_tokens[1].results] == [1.5, 1.05]
    assert [r.output_tokens_per_second for r in by_tokens[3].results] == [100.0, 300.0]
    one = by_tokens[1].results[0].acceptance
    # 50 steps drafting 50 tokens, 40 kept: 1.8 tokens per step.
    assert one is not None and one.mean_length == 1.8
    summary = json.loads(report.summary(measured, results_time(), {}, "abc"))
    assert summary["command"] == "abc"
    assert summary["draftLengths"]["1"] == {
        "outputTokensPerSecond": {"1": 75.0, "4": 420.0},
        "meanLength": {"1": 1.8, "4": 1.8},
        "spread": {"1": 0.0, "4": 0.0},
    }
    # Repeats spread: the farthest run from the median, relative to it (one run has none).
    assert results.spread(100.0, [80.0, 100.0, 130.0]) == pytest.approx(0.3)
    assert results.spread(100.0, [100.0]) == 0.0
    assert summary["draftLengths"]["0"]["meanLength"] == {"1": 1.0, "4": 1.0}
    assert summary["meanLength"] == {"1": 3.7, "4": 3.7}
    table = report.table(measured)
    assert "K=0" in table and "K=1" in table and "75.0 (1.50x)" in table
    with pytest.raises(results.ResultsError, match="draft-2 result at concurrency 4"):
        results.with_draft_lengths(comparison, {2: _draft_log(2, {1: 75.0})}, "vllm")


def test_plot_with_draft_lengths_is_written(tmp_path: Path) -> None:
    from specdeploy.speedup.plot import plot

    log = _log({("baseline", 1): 50.0, ("speculative", 1): 100.0})
    comparison = results.with_draft_lengths(
        results.compare(log, "vllm", (1,)),
        {0: None, 1: _draft_log(1, {1: 75.0}), "idle": _draft_log("idle", {1: 45.0})},
        "vllm",
    )
    path = tmp_path / "bench.png"
    plot(comparison, "title", path)
    assert path.stat().st_size > 10_000

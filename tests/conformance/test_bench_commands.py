"""The benchmark's commands, read by the engines' own parsers: each baseline is the same server
without speculation, and the load Job's ``vllm bench serve`` means what ``speedup.load`` meant."""

from __future__ import annotations

from specdeploy import engines
from specdeploy.speedup import Load
from test_engine_parsers import VALID, ParseAll, spec_of

SPECULATIVE_VALUES = {
    "vllm": ("speculative_config",),
    "sglang": (
        "speculative_algorithm", "speculative_draft_model_path", "speculative_draft_model_revision",
        "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens",
    ),
}  # fmt: skip


def test_every_baseline_is_the_same_server_without_speculation(parse_all: ParseAll) -> None:
    for engine, valid in VALID.items():
        commands = [engines.render(spec_of(raw, engine)).command for raw in valid.values()]
        baselines = [engines.engine_for(engine).baseline_command(command) for command in commands]
        results = parse_all(engine, commands + baselines)["results"]
        for name, spec_result, base_result in zip(valid, results, results[len(commands) :], strict=False):
            assert base_result["ok"], f"{engine} {name} baseline: {base_result['error']}"
            spec_values, base_values = spec_result["values"], base_result["values"]
            speculative = SPECULATIVE_VALUES[engine]
            assert all(base_values[key] is None for key in speculative), (engine, name, base_values)
            assert any(spec_values[key] is not None for key in speculative), (engine, name)
            others = {k: v for k, v in spec_values.items() if k not in speculative}
            assert {k: v for k, v in base_values.items() if k not in speculative} == others, (engine, name)


def test_the_load_is_what_was_meant(parse_all: ParseAll) -> None:
    model = "Qwen/Qwen3-30B-A3B-Instruct-2507"
    load = Load(concurrencies=(1, 16), prompts=200, input_len=512, output_len=256, seed=3, temperature=0.0)
    argv = [*load.argv("http://10.1.2.3:8000", model, model, 16), "--save-result", "--result-dir", "/tmp/r"]
    response = parse_all("vllm-bench", [argv, [*argv, "--no-such-flag"]])
    parsed, refused = response["results"]
    assert parsed["ok"], parsed["error"]
    assert not refused["ok"] and "unrecognized arguments" in refused["error"]
    options = {name for group in response["options"] for name in group}
    flags = [arg for arg in argv[3:] if arg.startswith("--")]
    assert [flag for flag in flags if flag not in options] == [], "not exact option names"
    assert parsed["values"] == {
        "backend": "openai", "base_url": "http://10.1.2.3:8000", "endpoint": "/v1/completions",
        "model": model, "tokenizer": model, "dataset_name": "random",
        "input_len": 512, "output_len": 256, "ignore_eos": True, "num_prompts": 200,
        "max_concurrency": 16, "num_warmups": 16, "seed": 3, "temperature": 0.0,
        "percentile_metrics": "ttft,tpot,itl,e2el", "metric_percentiles": "50,99",
        "save_result": True, "result_dir": "/tmp/r", "result_filename": None,
    }  # fmt: skip


def test_vllm_runs_each_draft_length_copy_as_meant(parse_all: ParseAll) -> None:
    """A draft-length copy drafts its length at every batch size; the idle copy loads the draft
    and drafts none at any (vLLM's own expansion, what its scheduler looks up per step)."""
    command = engines.render(spec_of(VALID["vllm"]["schedule"], "vllm")).command
    engine = engines.engine_for("vllm")
    copies = [engine.draft_length_command(command, 1), engine.idle_draft_command(command)]
    one, idle = parse_all("vllm", copies)["results"]
    assert one["ok"] and idle["ok"], (one["error"], idle["error"])
    assert one["values"]["speculative_config"]["num_speculative_tokens"] == 1
    assert "draft_lengths" not in one
    assert idle["values"]["speculative_config"]["num_speculative_tokens"] == 3
    assert set(idle["draft_lengths"]) == {0} and len(idle["draft_lengths"]) > 8

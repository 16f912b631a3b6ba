"""The verbs agree: ``-o json|yaml`` on every verb that prints a result, one exit code per
meaning (``specdeploy.exitcodes``), and the inventory ``plan`` and ``render`` plan against
(the current kubeconfig's cluster, else the offline one), named on stderr and in the output."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from specdeploy.api.crd import custom_resource_definition, render_yaml
from specdeploy.cli import build_parser, main
from specdeploy.exitcodes import ExitCode
from support.paths import REPO

SEED = REPO / "manifests/examples/qwen3-30b-a3b-instruct-2507-eagle3.yaml"
QWEN3_30B = "Qwen/Qwen3-30B-A3B-Instruct-2507"
RH_30B = "RedHatAI/Qwen3-30B-A3B-Instruct-2507-speculator.eagle3"
# Nothing listens on port 1 of loopback: a cluster that refuses at once.
UNREACHABLE = "https://127.0.0.1:1"


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def write_cr(tmp_path: Path, spec: dict[str, Any]) -> Path:
    body = yaml.safe_load(SEED.read_text())
    body["spec"] = {**body["spec"], **spec}
    path = tmp_path / "cr.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def write_kubeconfig(path: Path, server: str = UNREACHABLE, current: str | None = "ctx") -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
    }
    if current:
        config["current-context"] = current
    path.write_text(yaml.safe_dump(config))
    return path


def _options(verb: str) -> dict[str, Any]:
    parser = build_parser()
    (subparsers,) = [a for a in parser._actions if a.dest == "command"]
    return {o: a for a in subparsers.choices[verb]._actions for o in a.option_strings}  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("verb", "formats"),
    [
        ("plan", ["text", "json", "yaml"]),
        ("check", ["text", "json", "yaml"]),
        ("bench", ["table", "json", "yaml"]),
        ("render", ["yaml", "json"]),
        ("crd", ["yaml", "json"]),
    ],
)
def test_every_verb_that_prints_a_result_takes_o_as_a_format(verb: str, formats: list[str]) -> None:
    options = _options(verb)
    assert options["-o"] is options["--output"]
    assert list(options["-o"].choices) == formats and options["-o"].default == formats[0]


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "-f", str(SEED), "--offline"],
        ["check", QWEN3_30B, RH_30B],
        ["crd"],
    ],
    ids=["plan", "check", "crd"],
)
def test_yaml_holds_what_json_holds(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, as_json, _ = run(capsys, *argv, "-o", "json")
    code_yaml, as_yaml, _ = run(capsys, *argv, "-o", "yaml")
    assert (code, code_yaml) == (0, 0)
    assert yaml.safe_load(as_yaml) == json.loads(as_json)


def test_render_json_is_a_list_kubectl_applies(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "render", "-f", str(SEED), "--offline", "-o", "json")
    listed = json.loads(out)
    assert (code, listed["apiVersion"], listed["kind"]) == (0, "v1", "List")
    as_yaml = run(capsys, "render", "-f", str(SEED), "--offline")[1]
    assert listed["items"] == list(yaml.safe_load_all(as_yaml))


def test_crd_writes_a_file_with_output_file_and_o_is_a_format(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "crd.yaml"
    assert main(["crd", "--output-file", str(target)]) == 0
    assert target.read_text() == render_yaml()
    assert main(["crd", "-o", "json", "--output-file", str(target)]) == 0
    assert json.loads(target.read_text()) == custom_resource_definition()
    with pytest.raises(SystemExit) as exited:
        main(["crd", "-o", str(target)])
    assert exited.value.code == ExitCode.BAD_INPUT
    assert "invalid choice" in capsys.readouterr().err


@pytest.mark.parametrize(
    "spec",
    [
        {"replicas": -1},
        {"parallelism": {"tensor": 3}},
        {"parallelism": {"tensor": 128}},
        {"speculator": {"model": RH_30B, "numSpeculativeTokens": 0}},
        {"engine": {"name": "tgi"}},
    ],
    ids=["negative-replicas", "tp-3", "tp-128", "zero-draft-tokens", "unknown-engine"],
)
def test_the_same_invalid_resource_exits_2_from_plan_and_render(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spec: dict[str, Any]
) -> None:
    cr = str(write_cr(tmp_path, spec))
    assert run(capsys, "plan", "-f", cr, "--offline")[0] == ExitCode.BAD_INPUT
    code, out, err = run(capsys, "render", "-f", cr, "--offline")
    assert (code, out) == (ExitCode.BAD_INPUT, "")
    assert "error:" in err


def test_nothing_fits_exits_1_from_plan_and_render(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cr = str(write_cr(tmp_path, {}))
    assert run(capsys, "plan", "-f", cr, "--gpus", "l4:1")[0] == ExitCode.REFUSED
    assert run(capsys, "render", "-f", cr, "--gpus", "l4:1")[0] == ExitCode.REFUSED


@pytest.mark.parametrize("verb", ["plan", "render"])
def test_without_a_kubeconfig_the_offline_cluster_is_used_and_named(
    verb: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, verb, "-f", str(SEED), "-o", "json")
    assert code == 0
    assert "planning against the offline cluster" in err
    if verb == "plan":
        assert json.loads(out)["inventory"] == {"source": "offline"}


def test_a_kubeconfig_without_a_current_context_is_no_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "config", current=None)))
    code, out, _ = run(capsys, "plan", "-f", str(SEED), "-o", "json")
    assert (code, json.loads(out)["inventory"]) == (0, {"source": "offline"})


def test_a_broken_kubeconfig_is_an_error_not_a_silent_offline_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken"
    broken.write_text("clusters: [unclosed\n")
    monkeypatch.setenv("KUBECONFIG", str(broken))
    code, out, err = run(capsys, "plan", "-f", str(SEED))
    assert (code, out) == (ExitCode.BAD_INPUT, "")
    assert f"kubeconfig {broken}:" in err and "Traceback" not in err


def test_kubeconfig_files_are_merged_the_first_current_context_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.write_text("")
    paths = [tmp_path / "absent", empty, write_kubeconfig(tmp_path / "config")]
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join(map(str, paths)))
    code, _, err = run(capsys, "plan", "-f", str(SEED))
    assert code == ExitCode.CLUSTER_UNREACHABLE and "context ctx" in err


@pytest.mark.parametrize("verb", ["plan", "render"])
def test_the_current_kubeconfigs_cluster_is_the_default_and_unreachable_is_exit_7(
    verb: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "config")))
    code, out, err = run(capsys, verb, "-f", str(SEED))
    assert (code, out) == (ExitCode.CLUSTER_UNREACHABLE, "")
    assert f"cannot reach the cluster of context ctx ({UNREACHABLE})" in err
    assert "--offline (or --gpus) plans without the cluster" in err and "Traceback" not in err
    # --offline plans without it, whatever the kubeconfig says.
    assert run(capsys, verb, "-f", str(SEED), "--offline")[0] == 0


@pytest.mark.parametrize("verb", ["plan", "render"])
def test_an_explicit_kubeconfig_must_name_a_reachable_cluster(
    verb: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_kubeconfig(tmp_path / "config")
    code, _, err = run(capsys, verb, "-f", str(SEED), "--kubeconfig", str(config))
    assert code == ExitCode.CLUSTER_UNREACHABLE and "context ctx" in err
    code, _, err = run(capsys, verb, "-f", str(SEED), "--kubeconfig", str(tmp_path / "missing"))
    assert code == ExitCode.BAD_INPUT and f"--kubeconfig {tmp_path / 'missing'}" in err
    without_context = write_kubeconfig(tmp_path / "no-context", current=None)
    code, _, err = run(capsys, verb, "-f", str(SEED), "--kubeconfig", str(without_context))
    assert code == ExitCode.BAD_INPUT and "current-context" in err


def test_bench_and_session_share_the_exit_codes() -> None:
    from specdeploy.speedup import session

    assert (session.EXIT_USAGE, session.EXIT_NOT_READY, session.EXIT_BASELINE) == (2, 3, 4)
    assert (session.EXIT_LOAD, session.EXIT_TIMEOUT, session.EXIT_INTERRUPTED) == (5, 6, 130)
    assert all(isinstance(code, ExitCode) for code in (session.EXIT_USAGE, session.EXIT_INTERRUPTED))

"""The operator-wide default hub endpoint: validation, flag and environment precedence, what the
resolver's fetchers use and what the engine pods get as HF_ENDPOINT (a resource's own wins)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from specdeploy.cli import build_parser, main
from specdeploy.controller.main import apply_hub_endpoint
from specdeploy.modelinfo import ModelResolver, ModelUnavailable
from specdeploy.modelinfo import resolver as resolver_module
from specdeploy.modelinfo.hub import ENDPOINT_ENV, HubEndpointError, check_endpoint, default_endpoint
from support.paths import REPO

EXAMPLE = REPO / "manifests" / "examples" / "qwen3-30b-a3b-instruct-2507-eagle3.yaml"
MIRROR = "https://hf-mirror.example.internal/hub"


@pytest.fixture(autouse=True)
def no_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts without an operator default (and restores the variable afterwards)."""
    monkeypatch.delenv(ENDPOINT_ENV, raising=False)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("https://hf-mirror.example.internal", "https://hf-mirror.example.internal"),
        ("http://127.0.0.1:8090/", "http://127.0.0.1:8090"),
        (MIRROR + "/", MIRROR),
    ],
)
def test_an_http_url_is_accepted_without_its_trailing_slash(given: str, expected: str) -> None:
    assert check_endpoint(given, "--hub-endpoint") == expected


@pytest.mark.parametrize(
    "given",
    [
        "hf-mirror.example.internal",
        "ftp://mirror.example",
        "https://",
        "http://mirror:0",
        "http://mirror:port",
        "https://mirror.example/?x=1",
        "https://mirror.example/#top",
        "https://mirror .example",
        "http://[::1",
    ],
)
def test_anything_else_is_refused_naming_the_setting(given: str) -> None:
    with pytest.raises(HubEndpointError, match=r"--hub-endpoint: .* is not a hub endpoint"):
        check_endpoint(given, "--hub-endpoint")


def test_the_default_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert default_endpoint() is None
    monkeypatch.setenv(ENDPOINT_ENV, "  ")
    assert default_endpoint() is None
    monkeypatch.setenv(ENDPOINT_ENV, MIRROR + "/")
    assert default_endpoint() == MIRROR
    monkeypatch.setenv(ENDPOINT_ENV, "mirror.local")
    with pytest.raises(HubEndpointError, match=ENDPOINT_ENV):
        default_endpoint()


def test_the_flag_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert apply_hub_endpoint(None) is None
    monkeypatch.setenv(ENDPOINT_ENV, "http://from-env.example")
    assert apply_hub_endpoint(None) == "http://from-env.example"
    assert apply_hub_endpoint(MIRROR) == MIRROR
    assert default_endpoint() == MIRROR  # what the resolver and the Deployment builder now read


def test_an_invalid_environment_value_stops_the_operator_before_it_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ENDPOINT_ENV, "ftp://mirror.example")
    with pytest.raises(HubEndpointError):
        apply_hub_endpoint(None)
    assert apply_hub_endpoint(MIRROR) == MIRROR  # a valid flag replaces it


def test_the_run_flag_is_validated_by_argparse(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["run", "--hub-endpoint", MIRROR + "/"])
    assert args.hub_endpoint == MIRROR
    assert build_parser().parse_args(["run"]).hub_endpoint is None
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["run", "--hub-endpoint", "mirror.local"])
    assert exited.value.code == 2
    assert "--hub-endpoint: 'mirror.local' is not a hub endpoint" in capsys.readouterr().err


class RecordingFetcher:
    """Stands in for HubFetcher: records the endpoint each lookup would use, finds nothing."""

    endpoints: ClassVar[list[str | None]] = []

    def __init__(self, model: str, revision: str, *, endpoint: str | None, **_: Any) -> None:
        self.model = model
        self.endpoints.append(endpoint)

    def file(self, filename: str, *, required: bool) -> Path | None:
        raise ModelUnavailable("ModelNotFound", self.model, f"{self.model} has no {filename}")


def test_the_resolver_fetches_from_the_resource_endpoint_else_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(resolver_module, "HubFetcher", RecordingFetcher)
    RecordingFetcher.endpoints = []
    resolver = ModelResolver(use_catalog=False)

    def lookup(model: str, endpoint: str | None = None) -> None:
        with pytest.raises(ModelUnavailable):
            resolver.resolve(model, endpoint=endpoint)

    lookup("org/a")
    monkeypatch.setenv(ENDPOINT_ENV, MIRROR + "/")
    lookup("org/b")
    lookup("org/c", endpoint="https://own.example")
    lookup("org/a")  # a new default is a new cache key: looked up again, not answered from "not found"
    assert RecordingFetcher.endpoints == [None, MIRROR, "https://own.example", MIRROR]


def _engine_env(capsys: pytest.CaptureFixture[str], path: Path) -> dict[str, Any]:
    code = main(["render", "-f", str(path)])
    out = capsys.readouterr()
    assert code == 0, out.err
    deployment = next(d for d in yaml.safe_load_all(out.out) if d["kind"] == "Deployment")
    env = deployment["spec"]["template"]["spec"]["containers"][0].get("env", [])
    return {var["name"]: var.get("value") for var in env}


def test_engine_pods_get_the_default_unless_the_resource_sets_its_own(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert "HF_ENDPOINT" not in _engine_env(capsys, EXAMPLE)
    monkeypatch.setenv(ENDPOINT_ENV, MIRROR + "/")
    assert _engine_env(capsys, EXAMPLE)["HF_ENDPOINT"] == MIRROR

    body = yaml.safe_load(EXAMPLE.read_text())
    body["spec"].setdefault("modelAccess", {})["endpoint"] = "https://team-mirror.example"
    own = tmp_path / "own-endpoint.yaml"
    own.write_text(yaml.safe_dump(body))
    assert _engine_env(capsys, own)["HF_ENDPOINT"] == "https://team-mirror.example"


@pytest.mark.parametrize("command", ["render", "plan", "check"])
def test_cli_commands_refuse_an_invalid_default(
    command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(ENDPOINT_ENV, "hf-mirror")
    argv = {
        "render": ["render", "-f", str(EXAMPLE)],
        "plan": ["plan", "-f", str(EXAMPLE)],
        "check": ["check", "org/verifier", "org/speculator"],
    }[command]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{ENDPOINT_ENV}: 'hf-mirror' is not a hub endpoint" in err

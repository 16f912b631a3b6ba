"""The sandbox's model hub for real: olah serving a git repository on loopback, offline.

huggingface_hub downloads through it unmodified, and so does the operator's own resolver (its
config.json, tokenizer and safetensors-header reads, with the fallbacks olah needs). No cluster.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from specdeploy.modelinfo import ModelResolver, ModelUnavailable, RetryPolicy
from specdeploy.modelinfo.hub import ENDPOINT_ENV, HubFetcher
from specdeploy_sandbox.model_hub import (
    ModelHubError,
    ensure_hub_env,
    repo_dir,
    wait_ready,
)
from specdeploy_sandbox.processes import free_ports, rss_mib
from support.hub import running_hub

MODEL = "sandbox/tiny-test"
BIG_MODEL = "sandbox/big-weights"
BIG_TENSOR_BYTES = 48 * 2**20
FAST = RetryPolicy(attempts=2, initial_delay=0.05, max_delay=0.1, request_timeout=10.0)
CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 16, "vocab_size": 32}
TOKENIZER = {"version": "1.0", "model": {"type": "WordLevel", "vocab": {"<unk>": 0}, "unk_token": "<unk>"}}
GIT_ENV = {
    "GIT_AUTHOR_NAME": "specdeploy",
    "GIT_AUTHOR_EMAIL": "sandbox@specdeploy.invalid",
    "GIT_AUTHOR_DATE": "2025-01-01T00:00:00Z",
    "GIT_COMMITTER_NAME": "specdeploy",
    "GIT_COMMITTER_EMAIL": "sandbox@specdeploy.invalid",
    "GIT_COMMITTER_DATE": "2025-01-01T00:00:00Z",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def safetensors_bytes(tensors: dict[str, tuple[int, ...]]) -> bytes | None:
    """A float32 safetensors file of zeros made by the safetensors package (None without it)."""
    try:
        import numpy as np
        from safetensors.numpy import save
    except ImportError:
        return None
    return save({name: np.zeros(shape, dtype=np.float32) for name, shape in tensors.items()})


def git_repo(path: Path, files: dict[str, bytes], home: Path) -> str:
    """A git repository at ``path`` with ``files`` committed on main; returns the commit."""
    path.mkdir(parents=True)
    for name, data in files.items():
        (path / name).write_bytes(data)
    env = {**os.environ, **GIT_ENV, "HOME": str(home)}
    for argv in (
        ["init", "--quiet", "--initial-branch=main"],
        ["add", "--all"],
        ["commit", "--quiet", "-m", "model"],
    ):
        subprocess.run(["git", *argv], cwd=path, env=env, check=True, capture_output=True)
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=path, env=env, check=True, capture_output=True, text=True
    ).stdout.strip()


@dataclass(frozen=True)
class Hub:
    endpoint: str
    files: dict[str, bytes]
    weights: int | None
    big_weights: bool
    commit: str
    base: Path
    pid: int
    user_olah_dir_existed: bool


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    base = tmp_path_factory.mktemp("model-hub")
    mirrors, repos, home = base / "mirrors", base / "repos", base / "home"
    for directory in (repos, home):
        directory.mkdir()
    files = {
        "config.json": json.dumps(CONFIG).encode(),
        "tokenizer.json": json.dumps(TOKENIZER).encode(),
    }
    weights = safetensors_bytes({"embed.weight": (32, 16), "lm_head.weight": (32, 16)})
    if weights is not None:
        files["model.safetensors"] = weights
    commit = git_repo(repo_dir(mirrors, MODEL), files, home)
    big = safetensors_bytes({"big.weight": (BIG_TENSOR_BYTES // 4,)})
    if big is not None:
        big_files = {"config.json": files["config.json"], "model.safetensors": big}
        git_repo(repo_dir(mirrors, BIG_MODEL), big_files, home)

    user_olah_dir = Path.home() / ".olah"
    user_olah_dir_existed = user_olah_dir.exists()
    started = time.monotonic()
    python = ensure_hub_env(sys.stderr)
    print(f"olah venv ready in {time.monotonic() - started:.1f}s")
    try:
        started = time.monotonic()
        with running_hub(python, base, mirrors, repos, home) as (endpoint, process):
            print(f"olah answering in {time.monotonic() - started:.1f}s")
            expected = 2 * 32 * 16 * 4 if weights else None
            yield Hub(
                endpoint, files, expected, big is not None, commit, base, process.pid, user_olah_dir_existed
            )
    finally:
        print("--- olah output (tail) ---\n" + (base / "olah.out").read_text(errors="replace")[-3000:])


def test_huggingface_hub_downloads_through_it_byte_identical(hub: Hub, tmp_path: Path) -> None:
    from huggingface_hub import hf_hub_download, snapshot_download

    for name, data in hub.files.items():
        path = hf_hub_download(MODEL, name, cache_dir=tmp_path / "one", endpoint=hub.endpoint)
        assert Path(path).read_bytes() == data, name
    snapshot = Path(snapshot_download(MODEL, cache_dir=tmp_path / "all", endpoint=hub.endpoint))
    assert snapshot.name == hub.commit
    got = {p.name: p.read_bytes() for p in snapshot.iterdir() if p.is_file()}
    assert got == hub.files


def test_the_resolver_reads_config_tokenizer_and_weight_size(hub: Hub, tmp_path: Path) -> None:
    resolver = ModelResolver(cache_dir=tmp_path / "hf", retry=FAST, use_catalog=False)
    info = resolver.resolve(MODEL, endpoint=hub.endpoint, want_tokenizer=True)
    assert info.source == "hub"
    assert info.config["hidden_size"] == CONFIG["hidden_size"]
    assert info.config["vocab_size"] == CONFIG["vocab_size"]
    # olah answers a missing file of a repository it serves (the index, tokenizer_config.json) as
    # "repository not found"; the fetcher checks the repository and treats the file as absent.
    assert info.tokenizer_dir is not None
    assert (info.tokenizer_dir / "tokenizer.json").read_bytes() == hub.files["tokenizer.json"]
    assert info.weights_bytes == hub.weights


def test_the_operator_default_endpoint_is_used_when_the_resource_sets_none(
    hub: Hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENDPOINT_ENV, hub.endpoint + "/")
    resolver = ModelResolver(cache_dir=tmp_path / "hf", retry=FAST, use_catalog=False)
    assert resolver.resolve(MODEL).config["model_type"] == "llama"
    with pytest.raises(ModelUnavailable) as elsewhere:
        resolver.resolve(MODEL, endpoint="http://127.0.0.1:9")  # the resource's own endpoint wins
    assert elsewhere.value.reason == "HubUnreachable"
    assert "127.0.0.1:9" in elsewhere.value.message


def test_an_unknown_model_is_a_clear_not_found(hub: Hub, tmp_path: Path) -> None:
    resolver = ModelResolver(cache_dir=tmp_path / "hf", retry=FAST, use_catalog=False)
    with pytest.raises(ModelUnavailable) as caught:
        resolver.resolve("sandbox/no-such-model", endpoint=hub.endpoint)
    assert caught.value.reason == "ModelNotFound"
    assert "sandbox/no-such-model was not found" in caught.value.message


def test_weight_size_reads_only_the_header_though_olah_ignores_range(hub: Hub, tmp_path: Path) -> None:
    """olah answers a Range request with the whole file (200): the header read stops early, so a
    large shard is never held in memory to learn its size."""
    if not hub.big_weights:
        pytest.skip("the safetensors package is needed to build the weights file")
    fetcher = HubFetcher(
        BIG_MODEL,
        "main",
        token=None,
        endpoint=hub.endpoint,
        offline=False,
        cache_dir=str(tmp_path / "hf"),
        retry=FAST,
        sleep=time.sleep,
    )
    tracemalloc.start()
    try:
        assert fetcher.weights_bytes(None) == BIG_TENSOR_BYTES
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < BIG_TENSOR_BYTES // 8, f"peak {peak / 2**20:.1f} MiB while reading one header"


def test_olah_keeps_to_its_directories_and_stays_small(hub: Hub) -> None:
    """Its log beside the config, its cache (empty: offline, nothing proxied) where it was told,
    nothing in the user's home, and the served repository untouched."""
    assert (hub.base / "logs" / "olah.log").is_file()
    assert list((hub.base / "repos").iterdir()) == []
    if not hub.user_olah_dir_existed:
        assert not (Path.home() / ".olah").exists()
    status = subprocess.run(
        ["git", "status", "--porcelain", "--ignored"],
        cwd=repo_dir(hub.base / "mirrors", MODEL),
        capture_output=True,
        text=True,
        check=True,
    )
    assert status.stdout == ""
    rss = rss_mib(hub.pid)
    assert rss is not None
    print(f"olah idle RSS: {rss:.0f} MiB")
    assert rss < 400


def test_wait_ready_is_bounded() -> None:
    port = free_ports(1)[0]
    started = time.monotonic()
    with pytest.raises(ModelHubError, match="not ready within 1s"):
        wait_ready(f"http://127.0.0.1:{port}", 1.0)
    assert time.monotonic() - started < 5

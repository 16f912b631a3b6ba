"""ModelResolver: local directories, catalog, inline configs, caching, and the real
huggingface_hub download path against a loopback server speaking the Hub's file protocol
(HEAD/GET on /resolve/, with the Range requests that read safetensors headers)."""

from __future__ import annotations

import hashlib
import json
import math
import re
import socket
import struct
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import ClassVar

import pytest

from pairing_support import write_tokenizer
from specdeploy.modelinfo import ModelResolver, ModelUnavailable, RetryPolicy, info_from_config
from specdeploy.pairing import check_pair
from support import loopback

COMMIT = "0123456789abcdef0123456789abcdef01234567"
FAST = RetryPolicy(attempts=3, initial_delay=0.01, max_delay=0.02, request_timeout=1.0)

VERIFIER_CONFIG = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 64,
    "num_hidden_layers": 8,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 10,
}
SPECULATOR_CONFIG = {
    "architectures": ["Eagle3Speculator"],
    "speculators_model_type": "eagle3",
    "draft_vocab_size": 8,
    "target_hidden_size": None,
    "transformer_layer_config": {"hidden_size": 64, "vocab_size": 10, "num_hidden_layers": 1},
    "speculators_config": {
        "algorithm": "eagle3",
        "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 4}],
        "verifier": {"name_or_path": "hub-org/tiny-verifier", "architectures": ["Qwen3ForCausalLM"]},
    },
}


@dataclass(frozen=True)
class Sparse:
    """A file of ``size`` bytes: ``head`` then zeros, so a large shard costs no memory to serve."""

    head: bytes
    size: int

    def read(self, start: int, stop: int) -> bytes:
        stop = min(stop, self.size)
        return self.head[start:stop] + b"\0" * max(0, stop - max(start, len(self.head)))


ITEM_BYTES = {"U8": 1, "BF16": 2, "F32": 4}


def safetensors_file(tensors: dict[str, tuple[str, list[int]]]) -> Sparse:
    """A safetensors file (header length, JSON header, zeroed data) holding ``name: (dtype, shape)``."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size = ITEM_BYTES[dtype] * math.prod(shape)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    head = struct.pack("<Q", len(raw)) + raw
    return Sparse(head, len(head) + offset)


SHARDS = {  # 100_000_000 + 23_456_789 bytes of tensor data: the index's total_size
    "model-00001-of-00002.safetensors": safetensors_file({"model.layers.0.weight": ("BF16", [50_000_000])}),
    "model-00002-of-00002.safetensors": safetensors_file({"lm_head.weight": ("U8", [23_456_789])}),
}
WEIGHT_MAP = {
    "model.layers.0.weight": "model-00001-of-00002.safetensors",
    "lm_head.weight": "model-00002-of-00002.safetensors",
}


class HubHandler(BaseHTTPRequestHandler):
    """HEAD/GET /{repo}/resolve/{revision}/{filename}, with the headers huggingface_hub reads and
    single-range GETs answered 206 as the Hub does."""

    protocol_version = "HTTP/1.1"
    files: ClassVar[dict[tuple[str, str], bytes | Sparse]] = {}
    requests: ClassVar[list[tuple[str, str]]] = []
    gets: ClassVar[list[tuple[str, str]]] = []  # (filename, Range header or "")

    def log_message(self, format: str, *args: object) -> None:
        return

    def _answer(self, with_body: bool) -> None:
        self.requests.append((self.command, self.path))
        parts = self.path.split("?", 1)[0].strip("/").split("/")
        if len(parts) < 5 or parts[2] != "resolve":
            self._error(404, "RepoNotFound")
            return
        repo, revision, filename = "/".join(parts[:2]), parts[3], "/".join(parts[4:])
        if not any(r == repo for r, _ in self.files):
            self._error(404, "RepoNotFound")
            return
        if revision not in ("main", COMMIT):
            self._error(404, "RevisionNotFound")
            return
        blob = self.files.get((repo, filename))
        if blob is None:
            self._error(404, "EntryNotFound")
            return
        blob = blob if isinstance(blob, Sparse) else Sparse(blob, len(blob))
        start, stop = 0, blob.size
        wanted = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        if with_body:
            self.gets.append((filename, wanted.group(0) if wanted else ""))
        if wanted and with_body:
            start = int(wanted.group(1))
            stop = min(blob.size, int(wanted.group(2)) + 1) if wanted.group(2) else blob.size
        self.send_response(206 if wanted and with_body else 200)
        self.send_header("ETag", f'"{hashlib.sha256(blob.head).hexdigest()}-{blob.size}"')
        self.send_header("X-Repo-Commit", COMMIT)
        self.send_header("Accept-Ranges", "bytes")
        if wanted and with_body:
            self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{blob.size}")
        self.send_header("Content-Length", str(stop - start))
        self.end_headers()
        if with_body:
            self.wfile.write(blob.read(start, stop))

    def _error(self, status: int, code: str) -> None:
        self.send_response(status)
        self.send_header("X-Error-Code", code)
        self.send_header("X-Repo-Commit", COMMIT)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_HEAD(self) -> None:
        self._answer(with_body=False)

    def do_GET(self) -> None:
        self._answer(with_body=True)


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    from huggingface_hub import constants

    # get_safetensors_metadata downloads the index into the default Hub cache: keep it in tmp_path.
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "default-hub-cache"))
    tok = write_tokenizer(tmp_path / "tok")
    HubHandler.files = {
        ("hub-org/tiny-verifier", "config.json"): json.dumps(VERIFIER_CONFIG).encode(),
        ("hub-org/tiny-verifier", "model.safetensors.index.json"): json.dumps(
            {"metadata": {"total_size": 123456789}, "weight_map": WEIGHT_MAP}
        ).encode(),
        **{("hub-org/tiny-verifier", name): shard for name, shard in SHARDS.items()},
        ("hub-org/tiny-verifier", "tokenizer.json"): (tok / "tokenizer.json").read_bytes(),
        ("hub-org/tiny-verifier", "tokenizer_config.json"): (tok / "tokenizer_config.json").read_bytes(),
        ("hub-org/tiny-speculator.eagle3", "config.json"): json.dumps(SPECULATOR_CONFIG).encode(),
        ("hub-org/tiny-speculator.eagle3", "model.safetensors"): safetensors_file(
            {"fc.weight": ("F32", [16, 64])}
        ),
        ("hub-org/no-safetensors", "config.json"): json.dumps(VERIFIER_CONFIG).encode(),
        ("hub-org/broken", "config.json"): b"{not json",
    }
    HubHandler.requests = []
    HubHandler.gets = []
    with loopback.serve(HubHandler) as url:
        yield url


def test_hub_download_path_resolves_config_weights_and_tokenizer(hub: str, tmp_path: Path) -> None:
    resolver = ModelResolver(cache_dir=tmp_path / "hf-cache", retry=FAST)
    verifier = resolver.resolve("hub-org/tiny-verifier", endpoint=hub, want_tokenizer=True)
    assert verifier.source == "hub"
    assert verifier.config["hidden_size"] == 64
    assert verifier.weights_bytes == 123456789
    assert verifier.tokenizer_dir is not None and (verifier.tokenizer_dir / "tokenizer.json").is_file()
    assert COMMIT in str(verifier.tokenizer_dir)

    speculator = resolver.resolve("hub-org/tiny-speculator.eagle3", COMMIT, endpoint=hub)
    assert speculator.weights_bytes == 4096
    assert any(f"/resolve/{COMMIT}/config.json" in path for _, path in HubHandler.requests)

    seen = len(HubHandler.requests)
    assert resolver.resolve("hub-org/tiny-verifier", endpoint=hub, want_tokenizer=True) == verifier
    assert resolver.resolve("hub-org/tiny-verifier", endpoint=hub).tokenizer_dir is None
    assert len(HubHandler.requests) == seen, "a cached model must not be refetched"

    pytest.importorskip("jinja2")
    report = check_pair(verifier, speculator, engine="vllm")
    assert report.verified == "True", report.message
    assert report.check("declaredVerifier").status == "Passed"
    assert report.check("tokenizer").status == "Passed", report.check("tokenizer").message


@pytest.mark.parametrize(
    ("model", "revision", "reason"),
    [
        ("hub-org/missing", None, "ModelNotFound"),
        ("hub-org/tiny-verifier", "no-such-branch", "ModelNotFound"),
        ("hub-org/broken", None, "InvalidConfig"),
    ],
)
def test_hub_errors_map_to_stable_reasons(
    hub: str, tmp_path: Path, model: str, revision: str | None, reason: str
) -> None:
    resolver = ModelResolver(cache_dir=tmp_path / "hf-cache", retry=FAST)
    with pytest.raises(ModelUnavailable) as caught:
        resolver.resolve(model, revision, endpoint=hub)
    assert caught.value.reason == reason
    assert model in caught.value.message


def test_not_found_is_cached_briefly(hub: str, tmp_path: Path) -> None:
    now = [0.0]
    resolver = ModelResolver(cache_dir=tmp_path / "c", retry=FAST, negative_ttl=30, clock=lambda: now[0])
    for _ in range(2):
        with pytest.raises(ModelUnavailable):
            resolver.resolve("hub-org/missing", endpoint=hub)
    assert len(HubHandler.requests) == 1
    now[0] = 31.0
    with pytest.raises(ModelUnavailable):
        resolver.resolve("hub-org/missing", endpoint=hub)
    assert len(HubHandler.requests) == 2


def test_offline_uses_the_local_hub_cache(hub: str, tmp_path: Path) -> None:
    cache = tmp_path / "hf-cache"
    ModelResolver(cache_dir=cache, retry=FAST).resolve("hub-org/tiny-verifier", endpoint=hub)
    seen = len(HubHandler.requests)
    offline = ModelResolver(cache_dir=cache, retry=FAST)
    assert offline.resolve("hub-org/tiny-verifier", endpoint=hub, offline=True).config["vocab_size"] == 10
    assert len(HubHandler.requests) == seen
    with pytest.raises(ModelUnavailable) as caught:
        offline.resolve("hub-org/tiny-speculator.eagle3", endpoint=hub, offline=True)
    assert caught.value.reason == "HubUnreachable"


def test_weight_sizes_come_from_the_safetensors_headers_alone(hub: str, tmp_path: Path) -> None:
    resolver = ModelResolver(cache_dir=tmp_path / "hf-cache", retry=FAST)
    assert resolver.resolve("hub-org/tiny-verifier", endpoint=hub).weights_bytes == 123456789
    assert resolver.resolve("hub-org/tiny-speculator.eagle3", endpoint=hub).weights_bytes == 4096
    weight_gets = sorted((name, wanted) for name, wanted in HubHandler.gets if name.endswith(".safetensors"))
    assert weight_gets == [(name, "bytes=0-100000") for name in [*sorted(SHARDS), "model.safetensors"]]
    assert resolver.resolve("hub-org/no-safetensors", endpoint=hub).weights_bytes is None


def test_offline_weight_size_comes_from_the_cached_index(hub: str, tmp_path: Path) -> None:
    cache = tmp_path / "hf-cache"
    ModelResolver(cache_dir=cache, retry=FAST).resolve("hub-org/tiny-verifier", endpoint=hub)
    seen = len(HubHandler.requests)
    offline = ModelResolver(cache_dir=cache, retry=FAST).resolve(
        "hub-org/tiny-verifier", endpoint=hub, offline=True
    )
    assert offline.weights_bytes == 123456789
    assert len(HubHandler.requests) == seen


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_unreachable_hub_is_reported_after_bounded_retries(tmp_path: Path) -> None:
    sleeps: list[float] = []
    resolver = ModelResolver(cache_dir=tmp_path / "c", retry=FAST, sleep=sleeps.append)
    started = time.monotonic()
    with pytest.raises(ModelUnavailable) as caught:
        resolver.resolve("hub-org/tiny-verifier", endpoint=f"http://127.0.0.1:{_closed_port()}")
    assert caught.value.reason == "HubUnreachable"
    assert "hub-org/tiny-verifier" in caught.value.message and "3 attempts" in caught.value.message
    assert sleeps == [0.01, 0.02]
    assert time.monotonic() - started < 5


def test_unreachable_hub_falls_back_to_the_catalog_for_a_pinned_revision(tmp_path: Path) -> None:
    resolver = ModelResolver(cache_dir=tmp_path / "c", retry=FAST)
    found = resolver.resolve("Qwen/Qwen3-8B", "v1", endpoint=f"http://127.0.0.1:{_closed_port()}")
    assert found.source == "catalog" and "Hub unreachable" in (found.note or "")


def test_default_retry_policy_stays_bounded() -> None:
    policy = RetryPolicy()
    assert policy.attempts == 3
    assert sum(policy.delays()) + policy.attempts * policy.request_timeout < 10


def test_catalog_answers_without_network_and_is_cached() -> None:
    resolver = ModelResolver()
    first = resolver.resolve("qwen/qwen3-30b-a3b-instruct-2507")
    assert first.source == "catalog" and first.weights_bytes == 61_100_000_000
    assert first.model_id == "Qwen/Qwen3-30B-A3B-Instruct-2507"
    assert resolver.resolve("qwen/qwen3-30b-a3b-instruct-2507") is first
    # Without the network: the catalog answers, an unknown model is unavailable (never fetched).
    assert resolver.resolve("Qwen/Qwen3-8B", network=False).source == "catalog"
    with pytest.raises(ModelUnavailable, match="no metadata without a Hub lookup"):
        resolver.resolve("hub-org/unknown", network=False)


def test_cache_is_bounded() -> None:
    resolver = ModelResolver(max_entries=2)
    for model in ("Qwen/Qwen3-8B", "Qwen/Qwen3-32B", "meta-llama/Llama-3.1-8B-Instruct"):
        resolver.resolve(model)
    assert len(resolver._cache) == 2


def test_local_directory(tmp_path: Path) -> None:
    model = tmp_path / "verifier"
    write_tokenizer(model)
    (model / "config.json").write_text(json.dumps(VERIFIER_CONFIG))
    (model / "model-00001-of-00002.safetensors").write_bytes(b"\0" * 100)
    (model / "model-00002-of-00002.safetensors").write_bytes(b"\0" * 50)
    found = ModelResolver().resolve(str(model))
    assert (found.source, found.weights_bytes, found.tokenizer_dir) == ("local", 150, model)
    with pytest.raises(ModelUnavailable) as caught:
        ModelResolver().resolve(str(tmp_path / "nowhere"))
    assert caught.value.reason == "ModelNotFound"


def test_inline_config() -> None:
    meta = info_from_config("org/model", json.dumps(VERIFIER_CONFIG))
    assert (meta.source, meta.config["hidden_size"]) == ("configmap", 64)
    for bad in ("{", "[1]", "{}"):
        with pytest.raises(ModelUnavailable) as caught:
            info_from_config("org/model", bad)
        assert caught.value.reason == "InvalidConfig" and "org/model" in caught.value.message


def test_a_tokenizer_file_above_the_byte_limit_is_skipped_naming_the_limit(hub: str, tmp_path: Path) -> None:
    """The HEAD's size refuses it before any byte is downloaded; the rule says why it skipped."""
    HubHandler.files[("hub-org/tiny-verifier", "tokenizer.json")] = Sparse(b"{", 2 * 2**20)
    resolver = ModelResolver(cache_dir=tmp_path / "c", retry=FAST, tokenizer_max_bytes=2**20)
    verifier = resolver.resolve("hub-org/tiny-verifier", endpoint=hub, want_tokenizer=True)
    assert verifier.tokenizer_dir is None
    assert (
        verifier.tokenizer_note == "tokenizer.json of hub-org/tiny-verifier is 2.0 MiB, above the 1 MiB limit"
    )
    assert ("tokenizer.json", "") not in HubHandler.gets
    speculator = resolver.resolve("hub-org/tiny-speculator.eagle3", endpoint=hub)
    check = check_pair(verifier, speculator, engine="vllm").check("tokenizer")
    assert (check.status, check.reason, check.message) == (
        "Skipped",
        "TokenizerUnavailable",
        verifier.tokenizer_note,
    )
    # Remembered for the revision: the next pass does not ask again.
    seen = len(HubHandler.requests)
    assert resolver.resolve("hub-org/tiny-verifier", endpoint=hub, want_tokenizer=True) == verifier
    assert len(HubHandler.requests) == seen


class StallingHub(HubHandler):
    """Answers HEAD as the Hub does; a GET of tokenizer.json sends its headers, then ``trickle``
    bytes a second (0: nothing) until the client gives up."""

    trickle: ClassVar[int] = 0

    def do_GET(self) -> None:
        if not self.path.endswith("/tokenizer.json"):
            super().do_GET()
            return
        self.requests.append((self.command, self.path))
        self.send_response(200)
        self.send_header("Content-Length", str(10**6))
        self.end_headers()
        deadline = time.monotonic() + 10
        try:
            while time.monotonic() < deadline:
                if self.trickle:
                    self.wfile.write(b" " * self.trickle)
                    self.wfile.flush()
                time.sleep(0.1)
        except OSError:
            return


@pytest.mark.parametrize(
    ("trickle", "note"),
    [
        (
            0,
            "tokenizer files: cannot fetch tokenizer.json of hub-org/tiny-verifier@main from {hub} "
            "after 1 attempts",
        ),
        (10, "tokenizer.json of hub-org/tiny-verifier@main was not received in time"),
    ],
)
def test_a_hub_that_stalls_skips_the_rule_within_the_bounds(
    hub: str, tmp_path: Path, trickle: int, note: str
) -> None:
    """A stalled response ends at the request timeout; one that trickles bytes at the lookup's
    deadline. Either way the pass goes on, and the lookup is retried after a while."""
    StallingHub.trickle = trickle
    now = [0.0]
    resolver = ModelResolver(
        cache_dir=tmp_path / "c", retry=FAST, tokenizer_deadline=1.5, clock=lambda: now[0], negative_ttl=60
    )
    with loopback.serve(StallingHub) as stalling:
        started = time.monotonic()
        verifier = resolver.resolve("hub-org/tiny-verifier", endpoint=stalling, want_tokenizer=True)
        took = time.monotonic() - started
        assert verifier.tokenizer_dir is None
        assert (verifier.tokenizer_note or "").startswith(note.format(hub=stalling)), verifier.tokenizer_note
        assert took < 4, f"the lookup took {took:.1f}s"
        assert not list((tmp_path / "c").rglob("*.part")), "a partial download was left behind"
        assert tokenizer_gets() == 1
        resolver.resolve("hub-org/tiny-verifier", endpoint=stalling, want_tokenizer=True)
        assert tokenizer_gets() == 1
        now[0] = 61.0
        resolver.resolve("hub-org/tiny-verifier", endpoint=stalling, want_tokenizer=True)
        assert tokenizer_gets() == 2


def tokenizer_gets() -> int:
    return sum(
        1 for method, path in HubHandler.requests if method == "GET" and path.endswith("/tokenizer.json")
    )


def test_concurrent_lookups_of_one_tokenizer_ask_the_hub_once(hub: str, tmp_path: Path) -> None:
    """A restart's passes all want the same model's tokenizer at once: one lookup, the others
    wait for its answer."""

    def tokenizer_requests() -> int:
        return sum("tokenizer" in path for _, path in HubHandler.requests)

    alone = ModelResolver(cache_dir=tmp_path / "alone", retry=FAST)
    alone.resolve("hub-org/tiny-verifier", endpoint=hub, want_tokenizer=True)
    once = tokenizer_requests()
    assert once > 0
    HubHandler.requests = []
    resolver = ModelResolver(cache_dir=tmp_path / "together", retry=FAST)
    with ThreadPoolExecutor(max_workers=8) as pool:
        found = list(
            pool.map(
                lambda _: resolver.resolve("hub-org/tiny-verifier", endpoint=hub, want_tokenizer=True),
                range(8),
            )
        )
    assert tokenizer_requests() == once
    assert {info.tokenizer_dir for info in found} == {found[0].tokenizer_dir} != {None}
    assert resolver._fetching == {}

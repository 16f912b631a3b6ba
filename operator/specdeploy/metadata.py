"""Model metadata: what the pairing check and the GPU planner know about one model.

``MetadataResolver`` finds a model's config.json (and tokenizer files when asked) in a local
directory, the built-in catalog or the Hugging Face Hub, caches the answer so a reconcile never
refetches, and turns every failure into ``MetadataUnavailable`` with a stable reason, so the
operator reports a condition instead of crashing.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

MetadataSource = Literal["catalog", "hub", "local", "configmap", "inline"]

DEFAULT_REVISION = "main"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")

_R = TypeVar("_R")

UnavailableReason = Literal["HubUnreachable", "ModelNotFound", "GatedOrUnauthorized", "InvalidConfig"]


@dataclass(frozen=True)
class ModelMetadata:
    """config.json of one model at one revision, plus what else was found next to it."""

    model_id: str
    revision: str | None
    config: dict[str, Any]
    source: MetadataSource
    weights_bytes: int | None = None
    tokenizer_dir: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class MetadataUnavailable(Exception):
    """A model's metadata could not be obtained; ``reason`` is stable, the message names the model."""

    def __init__(self, reason: UnavailableReason, model_id: str, message: str) -> None:
        super().__init__(message)
        self.reason: UnavailableReason = reason
        self.model_id = model_id
        self.message = message


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded exponential backoff for Hub requests (defaults stay under about ten seconds)."""

    attempts: int = 3
    initial_delay: float = 0.5
    max_delay: float = 2.0
    request_timeout: float = 2.0

    def delays(self) -> list[float]:
        """Sleeps between attempts: initial, doubled each time, capped."""
        return [min(self.max_delay, self.initial_delay * 2**i) for i in range(max(0, self.attempts - 1))]


def metadata_from_config(
    model_id: str,
    config: dict[str, Any] | str | bytes,
    *,
    revision: str | None = None,
    source: MetadataSource = "configmap",
    weights_bytes: int | None = None,
) -> ModelMetadata:
    """Metadata from a config.json given inline (a ConfigMap's verifier.json / speculator.json),
    for models the operator cannot reach."""
    if isinstance(config, str | bytes):
        try:
            config = json.loads(config)
        except ValueError as exc:
            raise MetadataUnavailable(
                "InvalidConfig", model_id, f"config.json of {model_id} is not valid JSON: {exc}"
            ) from exc
    _validate_config(model_id, config)
    assert isinstance(config, dict)
    return ModelMetadata(
        model_id=model_id, revision=revision, config=config, source=source, weights_bytes=weights_bytes
    )


def _validate_config(model_id: str, config: object) -> None:
    if not isinstance(config, dict):
        raise MetadataUnavailable(
            "InvalidConfig", model_id, f"config.json of {model_id} is not a JSON object"
        )
    if not config.get("architectures") and not config.get("model_type"):
        raise MetadataUnavailable(
            "InvalidConfig", model_id, f"config.json of {model_id} has neither architectures nor model_type"
        )


def _read_config(model_id: str, path: Path) -> dict[str, Any]:
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise MetadataUnavailable(
            "InvalidConfig", model_id, f"config.json of {model_id} cannot be read: {exc}"
        ) from exc
    _validate_config(model_id, config)
    assert isinstance(config, dict)
    return config


def _index_total(path: Path) -> int | None:
    """metadata.total_size of a model.safetensors.index.json, when present and sane."""
    try:
        index = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    total = index.get("metadata", {}).get("total_size") if isinstance(index, dict) else None
    return int(total) if isinstance(total, int | float) and total > 0 else None


def _local_metadata(directory: Path, revision: str | None) -> ModelMetadata:
    model_id = str(directory)
    config = _read_config(model_id, directory / "config.json")
    weights: int | None = None
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        weights = _index_total(index)
    if weights is None:
        shards = list(directory.glob("*.safetensors"))
        weights = sum(p.stat().st_size for p in shards) if shards else None
    has_tokenizer = any((directory / name).is_file() for name in TOKENIZER_FILES)
    return ModelMetadata(
        model_id=model_id,
        revision=revision,
        config=config,
        source="local",
        weights_bytes=weights,
        tokenizer_dir=directory if has_tokenizer else None,
    )


_CacheKey = tuple[str, str, str | None]


@dataclass
class _Negative:
    error: MetadataUnavailable
    expires: float


class MetadataResolver:
    """Resolves model metadata from a local directory, the catalog, then the Hub, with caching.

    The cache is keyed by (model, revision, endpoint) and bounded; an entry fetched with tokenizer
    files also answers requests without them. "Not found" answers are remembered for
    ``negative_ttl`` seconds so a broken resource does not hammer the Hub; unreachable-Hub answers
    are not, so the next reconcile tries again.
    """

    def __init__(
        self,
        *,
        cache_dir: str | Path | None = None,
        retry: RetryPolicy | None = None,
        max_entries: int = 256,
        negative_ttl: float = 60.0,
        use_catalog: bool = True,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.cache_dir = str(cache_dir) if cache_dir is not None else None
        self.retry = retry or RetryPolicy()
        self.max_entries = max_entries
        self.negative_ttl = negative_ttl
        self.use_catalog = use_catalog
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._cache: OrderedDict[_CacheKey, ModelMetadata] = OrderedDict()
        self._negative: OrderedDict[_CacheKey, _Negative] = OrderedDict()

    @staticmethod
    def _key(model: str, revision: str | None, endpoint: str | None) -> _CacheKey:
        return (model.strip().rstrip("/"), revision or DEFAULT_REVISION, (endpoint or "").rstrip("/") or None)

    def peek(
        self, model: str, revision: str | None = None, *, endpoint: str | None = None
    ) -> ModelMetadata | None:
        """What is known without any network call: a local directory, the cache or the catalog.

        The admission webhook uses this to decide within its deadline."""
        try:
            return self.resolve(model, revision, endpoint=endpoint, network=False)
        except MetadataUnavailable:
            return None

    def resolve(
        self,
        model: str,
        revision: str | None = None,
        *,
        token: str | None = None,
        endpoint: str | None = None,
        offline: bool = False,
        want_tokenizer: bool = False,
        network: bool = True,
    ) -> ModelMetadata:
        """Metadata of ``model`` (a Hub id or a local directory) at ``revision``.

        ``network=False`` answers only from a local directory, the cache and the catalog (the
        catalog only for the default revision, which is what it describes)."""
        local = Path(model).expanduser()
        if model.startswith((".", "/", "~")) or local.is_dir():
            if not (local / "config.json").is_file():
                raise MetadataUnavailable(
                    "ModelNotFound", model, f"{model} is not a directory holding config.json"
                )
            return _local_metadata(local, revision)

        key = self._key(model, revision, endpoint)
        cached = self._cached(key, want_tokenizer)
        if cached is not None:
            return cached

        catalog_first = revision in (None, DEFAULT_REVISION) and self.use_catalog
        from_catalog = self._from_catalog(model) if catalog_first else None
        if from_catalog is not None:
            self._store(key, from_catalog)
            return from_catalog
        if not network:
            raise MetadataUnavailable("HubUnreachable", model, f"{model}: no metadata without a Hub lookup")

        try:
            found = self._from_hub(model, revision, token, endpoint, offline, want_tokenizer)
        except MetadataUnavailable as exc:
            fallback = self._from_catalog(model) if exc.reason == "HubUnreachable" else None
            if fallback is not None:
                note = f"Hub unreachable; catalog facts (default revision) used for {model}@{revision}"
                return ModelMetadata(
                    model_id=fallback.model_id,
                    revision=fallback.revision,
                    config=fallback.config,
                    source="catalog",
                    weights_bytes=fallback.weights_bytes,
                    extra={**fallback.extra, "note": note},
                )
            if exc.reason != "HubUnreachable":
                with self._lock:
                    self._negative[key] = _Negative(exc, self._clock() + self.negative_ttl)
                    self._trim(self._negative)
            raise
        self._store(key, found)
        return found

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()
            self._negative.clear()

    def _cached(self, key: _CacheKey, want_tokenizer: bool) -> ModelMetadata | None:
        with self._lock:
            negative = self._negative.get(key)
            if negative is not None:
                if negative.expires > self._clock():
                    raise negative.error
                del self._negative[key]
            found = self._cache.get(key)
            if found is None:
                return None
            if want_tokenizer and found.source == "hub" and not found.extra.get("tokenizer_looked_up"):
                return None
            self._cache.move_to_end(key)
            return found

    def _store(self, key: _CacheKey, value: ModelMetadata) -> None:
        with self._lock:
            self._cache[key] = value
            self._cache.move_to_end(key)
            self._trim(self._cache)

    def _trim(self, cache: OrderedDict[_CacheKey, Any]) -> None:
        while len(cache) > self.max_entries:
            cache.popitem(last=False)

    def _from_catalog(self, model: str) -> ModelMetadata | None:
        if not self.use_catalog:
            return None
        from specdeploy import catalog

        return catalog.model_metadata(model)

    def _from_hub(
        self,
        model: str,
        revision: str | None,
        token: str | None,
        endpoint: str | None,
        offline: bool,
        want_tokenizer: bool,
    ) -> ModelMetadata:
        from huggingface_hub import constants

        offline = offline or constants.is_offline_mode()
        fetch = _HubFetcher(self, model, revision, token, endpoint, offline)
        config_path = fetch.file("config.json", required=True)
        assert config_path is not None
        config = _read_config(model, config_path)

        weights: int | None = None
        index_path = fetch.file("model.safetensors.index.json", required=False)
        if index_path is not None:
            weights = _index_total(index_path)
        if weights is None and not offline:
            weights = fetch.size("model.safetensors")

        tokenizer_dir: Path | None = None
        if want_tokenizer:
            found = [fetch.file(name, required=False) for name in TOKENIZER_FILES]
            if any(path is not None for path in found):
                tokenizer_dir = config_path.parent
        return ModelMetadata(
            model_id=model,
            revision=revision,
            config=config,
            source="hub",
            weights_bytes=weights,
            tokenizer_dir=tokenizer_dir,
            extra={"tokenizer_looked_up": want_tokenizer, "endpoint": endpoint},
        )


class _HubFetcher:
    """One model's Hub downloads, with the resolver's retry policy and error mapping.

    huggingface_hub retries a failed HEAD inside hf_hub_download for up to half a minute, so each
    attempt first makes one HEAD without retries and only then downloads; the backoff is ours."""

    def __init__(
        self,
        resolver: MetadataResolver,
        model: str,
        revision: str | None,
        token: str | None,
        endpoint: str | None,
        offline: bool,
    ) -> None:
        self.resolver = resolver
        self.model = model
        self.revision = revision or DEFAULT_REVISION
        self.token = token
        self.endpoint = endpoint
        self.offline = offline

    def file(self, filename: str, *, required: bool) -> Path | None:
        from huggingface_hub import hf_hub_download

        def download() -> Path:
            if not self.offline:
                self._head(filename)
            return Path(
                hf_hub_download(
                    self.model,
                    filename,
                    revision=self.revision,
                    cache_dir=self.resolver.cache_dir,
                    token=self.token,
                    endpoint=self.endpoint,
                    local_files_only=self.offline,
                    etag_timeout=self.resolver.retry.request_timeout,
                )
            )

        return self._with_retries(filename, download, required=required)

    def size(self, filename: str) -> int | None:
        """Size of a single-file checkpoint from its HEAD (X-Linked-Size), without downloading it."""
        return self._with_retries(filename, lambda: self._head(filename).size, required=False)

    def _head(self, filename: str) -> Any:
        from huggingface_hub import get_hf_file_metadata, hf_hub_url

        url = hf_hub_url(self.model, filename, revision=self.revision, endpoint=self.endpoint)
        return get_hf_file_metadata(
            url, token=self.token, timeout=self.resolver.retry.request_timeout, endpoint=self.endpoint
        )

    def _with_retries(self, filename: str, call: Callable[[], _R], *, required: bool) -> _R | None:
        import httpx2
        from huggingface_hub.errors import (
            FileMetadataError,
            GatedRepoError,
            HfHubHTTPError,
            HFValidationError,
            LocalEntryNotFoundError,
            RemoteEntryNotFoundError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )

        where = f"{self.model}@{self.revision}"
        delays = self.resolver.retry.delays()
        last = ""
        for attempt in range(len(delays) + 1):
            try:
                return call()
            except RemoteEntryNotFoundError as exc:
                if not required:
                    return None
                raise MetadataUnavailable(
                    "ModelNotFound", self.model, f"{where} has no {filename}"
                ) from exc
            except LocalEntryNotFoundError as exc:
                if self.offline:
                    if not required:
                        return None
                    raise MetadataUnavailable(
                        "HubUnreachable",
                        self.model,
                        f"offline mode: {filename} of {where} is not in the local cache",
                    ) from exc
                last = str(exc)
            except GatedRepoError as exc:
                raise MetadataUnavailable(
                    "GatedOrUnauthorized", self.model, f"{self.model} is gated: the token grants no access"
                ) from exc
            except RevisionNotFoundError as exc:
                raise MetadataUnavailable(
                    "ModelNotFound", self.model, f"revision {self.revision} of {self.model} does not exist"
                ) from exc
            except RepositoryNotFoundError as exc:
                status = exc.response.status_code if exc.response is not None else None
                if status == 403:
                    raise MetadataUnavailable(
                        "GatedOrUnauthorized", self.model, f"access to {self.model} is forbidden (HTTP 403)"
                    ) from exc
                raise MetadataUnavailable(
                    "ModelNotFound",
                    self.model,
                    f"{self.model} was not found on the Hub (or it is private and no valid token was given)",
                ) from exc
            except HFValidationError as exc:
                raise MetadataUnavailable(
                    "ModelNotFound", self.model, f"{self.model} is neither a Hub id nor a local directory"
                ) from exc
            except HfHubHTTPError as exc:
                status = exc.response.status_code if exc.response is not None else None
                if status in (401, 403):
                    raise MetadataUnavailable(
                        "GatedOrUnauthorized", self.model, f"{where}: HTTP {status} fetching {filename}"
                    ) from exc
                if status is not None and 400 <= status < 500 and status not in (408, 429):
                    raise MetadataUnavailable(
                        "ModelNotFound", self.model, f"{where}: HTTP {status} fetching {filename}"
                    ) from exc
                last = f"HTTP {status}"
            except (httpx2.TransportError, FileMetadataError, OSError) as exc:
                last = str(exc) or type(exc).__name__
            if attempt < len(delays):
                self.resolver._sleep(delays[attempt])
        attempts = len(delays) + 1
        raise MetadataUnavailable(
            "HubUnreachable",
            self.model,
            f"cannot fetch {filename} of {where} from {self.endpoint or 'the Hub'} "
            f"after {attempts} attempts: {last}",
        )

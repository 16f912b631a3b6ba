"""The model resolver: a model's ``ModelInfo`` from a local directory, the catalog or the Hub, cached.

It caches the answer so a reconcile never refetches, and remembers "not found" for a while so a
broken resource does not hammer the Hub. Tokenizer files (for the pairing check's tokenizer rule)
are looked up only when asked, bounded in bytes and time, and cached per revision like the rest.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdeploy.modelinfo import catalog
from specdeploy.modelinfo.hub import BoundExceeded, HubFetcher, RetryPolicy, default_endpoint
from specdeploy.modelinfo.info import (
    DEFAULT_REVISION,
    TOKENIZER_FILES,
    ModelInfo,
    ModelUnavailable,
    index_total,
    local_info,
    model_key,
    read_config,
)

_CacheKey = tuple[str, str, str | None]

# tokenizer.json of a 150k-token vocabulary (Qwen3) is about 11 MB; a file far above that is not
# one the rule should parse in the operator.
TOKENIZER_MAX_BYTES = 64 * 2**20
# All tokenizer files of one model, within one pass (which runs in a worker thread).
TOKENIZER_DEADLINE_S = 30.0
# Where the downloaded tokenizer files go, under the resolver's cache directory.
TOKENIZER_DIR = "specdeploy-tokenizers"


@dataclass
class _Negative:
    error: ModelUnavailable
    expires: float


@dataclass(frozen=True)
class _Tokenizer:
    """One model's tokenizer lookup: the files' directory, or why there is none; a lookup that
    may succeed later (the hub unreachable, too slow) ``expires``."""

    directory: Path | None
    note: str | None
    expires: float | None = None


class ModelResolver:
    """Resolves model metadata from a local directory, the catalog, then the Hub, with caching.

    The cache is keyed by (model, revision, endpoint) and bounded, and so is the one of tokenizer
    lookups. "Not found" answers are remembered for ``negative_ttl`` seconds so a broken resource
    does not hammer the Hub; unreachable-Hub answers are not, so the next reconcile tries again
    (a failed tokenizer lookup is retried after ``negative_ttl`` too: the rule is skipped meanwhile).
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
        tokenizer_max_bytes: int = TOKENIZER_MAX_BYTES,
        tokenizer_deadline: float = TOKENIZER_DEADLINE_S,
    ) -> None:
        self.cache_dir = str(cache_dir) if cache_dir is not None else None
        self.retry = retry or RetryPolicy()
        self.max_entries = max_entries
        self.negative_ttl = negative_ttl
        self.use_catalog = use_catalog
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._cache: OrderedDict[_CacheKey, ModelInfo] = OrderedDict()
        self._negative: OrderedDict[_CacheKey, _Negative] = OrderedDict()
        self._tokenizers: OrderedDict[_CacheKey, _Tokenizer] = OrderedDict()
        # A lock per tokenizer lookup in flight, dropped when it ends: never more than the
        # threads asking.
        self._fetching: dict[_CacheKey, threading.Lock] = {}
        self.tokenizer_max_bytes = tokenizer_max_bytes
        self.tokenizer_deadline = tokenizer_deadline

    @staticmethod
    def _key(model: str, revision: str | None, endpoint: str | None) -> _CacheKey:
        return (model_key(model), revision or DEFAULT_REVISION, (endpoint or "").rstrip("/") or None)

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
    ) -> ModelInfo:
        """Metadata of ``model`` (a Hub id or a local directory) at ``revision``.

        ``endpoint`` is the resource's hub; None means the operator-wide default
        (``SPECDEPLOY_HUB_ENDPOINT``), else huggingface_hub's own. ``network=False`` answers only
        from a local directory, the cache and the catalog (the catalog only for the default
        revision, which is what it describes). ``want_tokenizer`` adds the Hub's tokenizer files
        (for catalog facts too), or a note saying why there are none."""
        try:
            local = Path(model).expanduser()
            is_local = model.startswith((".", "/", "~")) or local.is_dir()
            has_config = is_local and (local / "config.json").is_file()
        except (RuntimeError, OSError) as exc:  # "~name" of no such user; a name too long for a path
            raise ModelUnavailable("ModelNotFound", model, f"{model} is not a directory: {exc}") from exc
        if is_local:
            if not has_config:
                raise ModelUnavailable(
                    "ModelNotFound", model, f"{model} is not a directory holding config.json"
                )
            return local_info(local, revision)

        endpoint = endpoint or default_endpoint()
        info = self._metadata(model, revision, token, endpoint, offline, network)
        if not want_tokenizer or not network:
            return info
        if info.note is not None:  # catalog facts stand in for an unreachable hub
            return dataclasses.replace(info, tokenizer_note=info.note)
        found = self._tokenizer(
            self._key(model, revision, endpoint), model, revision, token, endpoint, offline
        )
        return dataclasses.replace(info, tokenizer_dir=found.directory, tokenizer_note=found.note)

    def _metadata(
        self,
        model: str,
        revision: str | None,
        token: str | None,
        endpoint: str | None,
        offline: bool,
        network: bool,
    ) -> ModelInfo:
        key = self._key(model, revision, endpoint)
        cached = self._cached(key)
        if cached is not None:
            return cached

        catalog_first = revision in (None, DEFAULT_REVISION) and self.use_catalog
        from_catalog = self._from_catalog(model) if catalog_first else None
        if from_catalog is not None:
            self._store(key, from_catalog)
            return from_catalog
        if not network:
            raise ModelUnavailable("HubUnreachable", model, f"{model}: no metadata without a Hub lookup")

        try:
            found = self._from_hub(model, revision, token, endpoint, offline)
        except ModelUnavailable as exc:
            fallback = self._from_catalog(model) if exc.reason == "HubUnreachable" else None
            if fallback is not None:
                note = f"Hub unreachable; catalog facts (default revision) used for {model}@{revision}"
                return dataclasses.replace(fallback, note=note)
            if exc.reason != "HubUnreachable":
                with self._lock:
                    self._negative[key] = _Negative(exc, self._clock() + self.negative_ttl)
                    self._trim(self._negative)
            raise
        self._store(key, found)
        return found

    def _tokenizer(
        self,
        key: _CacheKey,
        model: str,
        revision: str | None,
        token: str | None,
        endpoint: str | None,
        offline: bool,
    ) -> _Tokenizer:
        """The model's tokenizer files from the hub (offline: from the local Hub cache), cached.

        One lookup per model at a time: the passes of a restart, each wanting the same model's
        files at once, wait for the first one's answer (found, or a failure kept until it is
        retried) instead of each asking the hub (1,000 passes, up to one per I/O thread)."""
        with self._lock:
            cached = self._fresh_tokenizer(key)
            if cached is not None:
                return cached
            fetching = self._fetching.setdefault(key, threading.Lock())
        with fetching:
            with self._lock:
                cached = self._fresh_tokenizer(key)
            if cached is not None:
                return cached
            try:
                found = self._fetch_tokenizer(model, revision, token, endpoint, offline)
                with self._lock:
                    self._tokenizers[key] = found
                    self._tokenizers.move_to_end(key)
                    self._trim(self._tokenizers)
            finally:
                with self._lock:
                    self._fetching.pop(key, None)
        return found

    def _fresh_tokenizer(self, key: _CacheKey) -> _Tokenizer | None:
        """The cached answer for ``key`` unless it is due to be retried (call with the lock held)."""
        cached = self._tokenizers.get(key)
        if cached is None or (cached.expires is not None and cached.expires <= self._clock()):
            return None
        self._tokenizers.move_to_end(key)
        return cached

    def _fetch_tokenizer(
        self, model: str, revision: str | None, token: str | None, endpoint: str | None, offline: bool
    ) -> _Tokenizer:
        from huggingface_hub import constants

        offline = offline or constants.is_offline_mode()
        # One attempt per request: a failed lookup only skips the rule until it is retried.
        fetch = dataclasses.replace(
            self._fetcher(model, revision, token, endpoint, offline),
            retry=dataclasses.replace(self.retry, attempts=1),
        )
        retry_at = self._clock() + self.negative_ttl
        try:
            if offline:
                found = [fetch.file(name, required=False) for name in TOKENIZER_FILES]
                directory = next((path.parent for path in found if path is not None), None)
            else:
                root = Path(self.cache_dir or constants.HF_HUB_CACHE) / TOKENIZER_DIR
                deadline = time.monotonic() + self.tokenizer_deadline
                directory = fetch.tokenizer_files(
                    TOKENIZER_FILES, root, max_bytes=self.tokenizer_max_bytes, deadline=deadline
                )
        except BoundExceeded as exc:
            return _Tokenizer(None, str(exc), retry_at if exc.transient else None)
        except ModelUnavailable as exc:
            return _Tokenizer(None, f"tokenizer files: {exc}", retry_at)
        if directory is None:
            return _Tokenizer(None, f"{model} has no tokenizer files ({', '.join(TOKENIZER_FILES)})")
        return _Tokenizer(directory, None)

    def _cached(self, key: _CacheKey) -> ModelInfo | None:
        with self._lock:
            negative = self._negative.get(key)
            if negative is not None:
                if negative.expires > self._clock():
                    raise negative.error
                del self._negative[key]
            found = self._cache.get(key)
            if found is None:
                return None
            self._cache.move_to_end(key)
            return found

    def _store(self, key: _CacheKey, value: ModelInfo) -> None:
        with self._lock:
            self._cache[key] = value
            self._cache.move_to_end(key)
            self._trim(self._cache)

    def _trim(self, cache: OrderedDict[_CacheKey, Any]) -> None:
        while len(cache) > self.max_entries:
            cache.popitem(last=False)

    def _from_catalog(self, model: str) -> ModelInfo | None:
        if not self.use_catalog:
            return None
        return catalog.model_info(model)

    def _from_hub(
        self,
        model: str,
        revision: str | None,
        token: str | None,
        endpoint: str | None,
        offline: bool,
    ) -> ModelInfo:
        from huggingface_hub import constants

        offline = offline or constants.is_offline_mode()
        fetch = self._fetcher(model, revision, token, endpoint, offline)
        config_path = fetch.file("config.json", required=True)
        assert config_path is not None
        config = read_config(model, config_path)

        # Online, the shard headers give the exact size; offline, the index's total_size in the cache.
        index_path = fetch.file(constants.SAFETENSORS_INDEX_FILE, required=False)
        if offline:
            weights = index_total(index_path) if index_path is not None else None
        else:
            weights = fetch.weights_bytes(index_path)

        return ModelInfo(
            model_id=model, revision=revision, config=config, source="hub", weights_bytes=weights
        )

    def _fetcher(
        self, model: str, revision: str | None, token: str | None, endpoint: str | None, offline: bool
    ) -> HubFetcher:
        return HubFetcher(
            model,
            revision or DEFAULT_REVISION,
            token=token,
            endpoint=endpoint,
            offline=offline,
            cache_dir=self.cache_dir,
            retry=self.retry,
            sleep=self._sleep,
        )

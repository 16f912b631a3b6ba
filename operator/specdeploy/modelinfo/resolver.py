"""The model resolver: a model's ``ModelInfo`` from a local directory, the catalog or the Hub, cached.

It caches the answer so a reconcile never refetches, and remembers "not found" for a while so a
broken resource does not hammer the Hub.
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
from specdeploy.modelinfo.hub import HubFetcher, RetryPolicy, default_endpoint
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


@dataclass
class _Negative:
    error: ModelUnavailable
    expires: float


class ModelResolver:
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
        self._cache: OrderedDict[_CacheKey, ModelInfo] = OrderedDict()
        self._negative: OrderedDict[_CacheKey, _Negative] = OrderedDict()

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
        revision, which is what it describes)."""
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
            raise ModelUnavailable("HubUnreachable", model, f"{model}: no metadata without a Hub lookup")

        try:
            found = self._from_hub(model, revision, token, endpoint, offline, want_tokenizer)
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

    def _cached(self, key: _CacheKey, want_tokenizer: bool) -> ModelInfo | None:
        with self._lock:
            negative = self._negative.get(key)
            if negative is not None:
                if negative.expires > self._clock():
                    raise negative.error
                del self._negative[key]
            found = self._cache.get(key)
            if found is None:
                return None
            if want_tokenizer and found.source == "hub" and not found.tokenizer_looked_up:
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
        want_tokenizer: bool,
    ) -> ModelInfo:
        from huggingface_hub import constants

        offline = offline or constants.is_offline_mode()
        fetch = HubFetcher(
            model,
            revision or DEFAULT_REVISION,
            token=token,
            endpoint=endpoint,
            offline=offline,
            cache_dir=self.cache_dir,
            retry=self.retry,
            sleep=self._sleep,
        )
        config_path = fetch.file("config.json", required=True)
        assert config_path is not None
        config = read_config(model, config_path)

        # Online, the shard headers give the exact size; offline, the index's total_size in the cache.
        index_path = fetch.file(constants.SAFETENSORS_INDEX_FILE, required=False)
        if offline:
            weights = index_total(index_path) if index_path is not None else None
        else:
            weights = fetch.weights_bytes(index_path)

        tokenizer_dir: Path | None = None
        if want_tokenizer:
            found = [fetch.file(name, required=False) for name in TOKENIZER_FILES]
            if any(path is not None for path in found):
                tokenizer_dir = config_path.parent
        return ModelInfo(
            model_id=model,
            revision=revision,
            config=config,
            source="hub",
            weights_bytes=weights,
            tokenizer_dir=tokenizer_dir,
            tokenizer_looked_up=want_tokenizer,
        )

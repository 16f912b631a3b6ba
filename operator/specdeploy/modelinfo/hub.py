"""Hub access for the resolver: one model's downloads, with bounded retries and error mapping.

Every huggingface_hub failure becomes a ``ModelUnavailable`` with a stable reason; transient ones
(timeouts, 5xx, 429) are retried with the resolver's backoff, permanent ones are not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from specdeploy.modelinfo.info import ModelUnavailable, UnavailableReason

_R = TypeVar("_R")


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


@dataclass(frozen=True)
class HubFetcher:
    """One model's Hub downloads, with a retry policy and error mapping.

    huggingface_hub retries a failed HEAD inside hf_hub_download for up to half a minute, so each
    attempt first makes one HEAD without retries and only then downloads; the backoff is ours."""

    model: str
    revision: str
    token: str | None
    endpoint: str | None
    offline: bool
    cache_dir: str | None
    retry: RetryPolicy
    sleep: Callable[[float], None]

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
                    cache_dir=self.cache_dir,
                    token=self.token,
                    endpoint=self.endpoint,
                    local_files_only=self.offline,
                    etag_timeout=self.retry.request_timeout,
                )
            )

        return self._with_retries(filename, download, required=required)

    def weights_bytes(self) -> int | None:
        """Bytes of the safetensors weights: the tensors' data_offsets summed over every shard header.

        huggingface_hub picks model.safetensors or the index and reads only the shard headers (Range
        requests), so the size is known without downloading weights; a repo without safetensors, or
        with a header that does not parse, has no answer (the size is a hint, not a requirement).
        Only the header reads take our request timeout; its HEADs use huggingface_hub's own."""
        from huggingface_hub import HfApi
        from huggingface_hub.errors import NotASafetensorsRepoError, SafetensorsParsingError

        api = HfApi(endpoint=self.endpoint, token=self.token)

        def total() -> int | None:
            try:
                found = api.get_safetensors_metadata(
                    self.model, revision=self.revision, timeout=self.retry.request_timeout
                )
            except (NotASafetensorsRepoError, SafetensorsParsingError):
                return None
            spans = (
                tensor.data_offsets[1] - tensor.data_offsets[0]
                for shard in found.files_metadata.values()
                for tensor in shard.tensors.values()
            )
            return sum(spans) or None

        return self._with_retries("the safetensors headers", total, required=False)

    def _head(self, filename: str) -> None:
        from huggingface_hub import get_hf_file_metadata, hf_hub_url

        url = hf_hub_url(self.model, filename, revision=self.revision, endpoint=self.endpoint)
        get_hf_file_metadata(
            url, token=self.token, timeout=self.retry.request_timeout, endpoint=self.endpoint
        )

    def _with_retries(self, filename: str, call: Callable[[], _R], *, required: bool) -> _R | None:
        """``call()``, retried on transient failures; permanent ones raise at once (or give None
        for an optional file that is not there)."""
        from huggingface_hub.errors import FileMetadataError, HFValidationError

        # huggingface_hub re-exports its HTTP client as ``huggingface_hub.utils.httpx`` ("for
        # downstream libraries across major versions"; in __all__, built at run time, so mypy cannot
        # see it). Its HTTPError is the base of the hub's status errors and of the connection and
        # timeout errors, which none of huggingface_hub's own classes wraps.
        from huggingface_hub.utils import httpx  # type: ignore[attr-defined]

        failures = (httpx.HTTPError, HFValidationError, FileMetadataError, OSError)
        delays = self.retry.delays()
        last = ""
        for attempt in range(len(delays) + 1):
            try:
                return call()
            except failures as exc:
                if not required and self._file_absent(exc):
                    return None
                failure = self._permanent(exc, filename)
                if failure is not None:
                    raise failure from exc
                status = _http_status(exc)
                last = f"HTTP {status}" if status is not None else str(exc) or type(exc).__name__
            if attempt < len(delays):
                self.sleep(delays[attempt])
        raise ModelUnavailable(
            "HubUnreachable",
            self.model,
            f"cannot fetch {filename} of {self.model}@{self.revision} from "
            f"{self.endpoint or 'the Hub'} after {len(delays) + 1} attempts: {last}",
        )

    def _file_absent(self, exc: Exception) -> bool:
        """The repository answered and the file is not there (or, offline, not in the cache)."""
        from huggingface_hub.errors import LocalEntryNotFoundError, RemoteEntryNotFoundError

        return isinstance(exc, RemoteEntryNotFoundError) or (
            isinstance(exc, LocalEntryNotFoundError) and self.offline
        )

    def _permanent(self, exc: Exception, filename: str) -> ModelUnavailable | None:
        """What a failure that retrying cannot fix means for the model; None when it may pass."""
        from huggingface_hub.errors import (
            GatedRepoError,
            HFValidationError,
            LocalEntryNotFoundError,
            RemoteEntryNotFoundError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )

        model, where, status = self.model, f"{self.model}@{self.revision}", _http_status(exc)

        def fail(reason: UnavailableReason, message: str) -> ModelUnavailable:
            return ModelUnavailable(reason, model, message)

        if isinstance(exc, RemoteEntryNotFoundError):
            return fail("ModelNotFound", f"{where} has no {filename}")
        if isinstance(exc, LocalEntryNotFoundError):
            offline = f"offline mode: {filename} of {where} is not in the local cache"
            return fail("HubUnreachable", offline) if self.offline else None
        if isinstance(exc, GatedRepoError):
            return fail("GatedOrUnauthorized", f"{model} is gated: the token grants no access")
        if isinstance(exc, RevisionNotFoundError):
            return fail("ModelNotFound", f"revision {self.revision} of {model} does not exist")
        if isinstance(exc, RepositoryNotFoundError) and status == 403:
            return fail("GatedOrUnauthorized", f"access to {model} is forbidden (HTTP 403)")
        if isinstance(exc, RepositoryNotFoundError):
            private = "(or it is private and no valid token was given)"
            return fail("ModelNotFound", f"{model} was not found on the Hub {private}")
        if isinstance(exc, HFValidationError):
            return fail("ModelNotFound", f"{model} is neither a Hub id nor a local directory")
        if status in (401, 403):
            return fail("GatedOrUnauthorized", f"{where}: HTTP {status} fetching {filename}")
        if status is not None and 400 <= status < 500 and status not in (408, 429):
            return fail("ModelNotFound", f"{where}: HTTP {status} fetching {filename}")
        return None


def _http_status(exc: Exception) -> int | None:
    """The HTTP status of a huggingface_hub HTTP error (None for other failures)."""
    from huggingface_hub.errors import HfHubHTTPError

    response = exc.response if isinstance(exc, HfHubHTTPError) else None
    return None if response is None else int(response.status_code)

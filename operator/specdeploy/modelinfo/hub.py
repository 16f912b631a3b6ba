"""Hub access for the resolver: one model's downloads, with bounded retries and error mapping.

Every huggingface_hub failure becomes a ``ModelUnavailable`` with a stable reason; transient ones
(timeouts, 5xx, 429) are retried with the resolver's backoff, permanent ones are not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from specdeploy.modelinfo.info import DEFAULT_REVISION, ModelUnavailable

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


class HubFetcher:
    """One model's Hub downloads, with a retry policy and error mapping.

    huggingface_hub retries a failed HEAD inside hf_hub_download for up to half a minute, so each
    attempt first makes one HEAD without retries and only then downloads; the backoff is ours."""

    def __init__(
        self,
        model: str,
        revision: str | None,
        *,
        token: str | None,
        endpoint: str | None,
        offline: bool,
        cache_dir: str | None,
        retry: RetryPolicy,
        sleep: Callable[[float], None],
    ) -> None:
        self.model = model
        self.revision = revision or DEFAULT_REVISION
        self.token = token
        self.endpoint = endpoint
        self.offline = offline
        self.cache_dir = cache_dir
        self.retry = retry
        self.sleep = sleep

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

        # Listed in huggingface_hub.utils.__all__ (built at run time, so mypy cannot see it).
        from huggingface_hub.utils import httpx  # type: ignore[attr-defined]

        where = f"{self.model}@{self.revision}"
        delays = self.retry.delays()
        last = ""
        for attempt in range(len(delays) + 1):
            try:
                return call()
            except RemoteEntryNotFoundError as exc:
                if not required:
                    return None
                raise ModelUnavailable(
                    "ModelNotFound", self.model, f"{where} has no {filename}"
                ) from exc
            except LocalEntryNotFoundError as exc:
                if self.offline:
                    if not required:
                        return None
                    raise ModelUnavailable(
                        "HubUnreachable",
                        self.model,
                        f"offline mode: {filename} of {where} is not in the local cache",
                    ) from exc
                last = str(exc)
            except GatedRepoError as exc:
                raise ModelUnavailable(
                    "GatedOrUnauthorized", self.model, f"{self.model} is gated: the token grants no access"
                ) from exc
            except RevisionNotFoundError as exc:
                raise ModelUnavailable(
                    "ModelNotFound", self.model, f"revision {self.revision} of {self.model} does not exist"
                ) from exc
            except RepositoryNotFoundError as exc:
                status = exc.response.status_code if exc.response is not None else None
                if status == 403:
                    raise ModelUnavailable(
                        "GatedOrUnauthorized", self.model, f"access to {self.model} is forbidden (HTTP 403)"
                    ) from exc
                raise ModelUnavailable(
                    "ModelNotFound",
                    self.model,
                    f"{self.model} was not found on the Hub (or it is private and no valid token was given)",
                ) from exc
            except HFValidationError as exc:
                raise ModelUnavailable(
                    "ModelNotFound", self.model, f"{self.model} is neither a Hub id nor a local directory"
                ) from exc
            except HfHubHTTPError as exc:
                status = exc.response.status_code if exc.response is not None else None
                if status in (401, 403):
                    raise ModelUnavailable(
                        "GatedOrUnauthorized", self.model, f"{where}: HTTP {status} fetching {filename}"
                    ) from exc
                if status is not None and 400 <= status < 500 and status not in (408, 429):
                    raise ModelUnavailable(
                        "ModelNotFound", self.model, f"{where}: HTTP {status} fetching {filename}"
                    ) from exc
                last = f"HTTP {status}"
            # Connection and timeout failures reach us as httpx2 errors, which huggingface_hub exports
            # as ``huggingface_hub.utils.httpx``: none of its own error classes covers them.
            except (httpx.TransportError, FileMetadataError, OSError) as exc:
                last = str(exc) or type(exc).__name__
            if attempt < len(delays):
                self.sleep(delays[attempt])
        attempts = len(delays) + 1
        raise ModelUnavailable(
            "HubUnreachable",
            self.model,
            f"cannot fetch {filename} of {where} from {self.endpoint or 'the Hub'} "
            f"after {attempts} attempts: {last}",
        )

"""Hub access for the resolver: one model's downloads, with bounded retries and error mapping.

Every huggingface_hub failure becomes a ``ModelUnavailable`` with a stable reason; transient ones
(timeouts, 5xx, 429) are retried with the resolver's backoff, permanent ones are not.

The endpoint is the resource's ``spec.modelAccess.endpoint``, else the operator-wide default in
``SPECDEPLOY_HUB_ENDPOINT`` (the chart's ``hub.endpoint``, or ``specdeploy run --hub-endpoint``),
else huggingface_hub's own (``HF_ENDPOINT``, else the Hub). It is read from the environment, like
the default engine images, so ``specdeploy render`` and the operator agree.
"""

from __future__ import annotations

import json
import os
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from specdeploy.modelinfo.info import ModelUnavailable, UnavailableReason

if TYPE_CHECKING:
    from huggingface_hub import HfFileMetadata

_R = TypeVar("_R")

ENDPOINT_ENV = "SPECDEPLOY_HUB_ENDPOINT"
# The first read of a safetensors file asks for bytes 0-100000, as huggingface_hub does: nearly
# every header fits, so one request usually does.
HEADER_PROBE_BYTES = 100_001
# safetensors itself refuses headers above 100 MB; a larger length prefix is not a header.
MAX_HEADER_BYTES = 100_000_000


class HubEndpointError(ValueError):
    """A hub endpoint setting is not an absolute http(s) URL."""


def check_endpoint(url: str, setting: str) -> str:
    """``url`` without a trailing slash (huggingface_hub appends paths with one) when it is an
    absolute http(s) URL; ``setting`` names where it came from in the error."""
    try:
        parts = urlsplit(url)
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        port_ok = False
    else:
        port_ok = port_ok and parts.scheme in ("http", "https") and bool(parts.hostname)
    if not port_ok or parts.query or parts.fragment or any(c.isspace() for c in url):
        raise HubEndpointError(
            f"{setting}: {url!r} is not a hub endpoint; give an absolute http(s) URL without query "
            "or fragment, e.g. https://hf-mirror.example.internal"
        )
    return url.rstrip("/")


def default_endpoint() -> str | None:
    """The operator-wide hub endpoint (``SPECDEPLOY_HUB_ENDPOINT``), None when unset or empty."""
    raw = os.environ.get(ENDPOINT_ENV, "").strip()
    return check_endpoint(raw, ENDPOINT_ENV) if raw else None


class BoundExceeded(Exception):
    """A file the tokenizer download refuses: above its byte limit, or not received in time
    (``transient``: a later try may succeed). The message names the file, the model and the bound."""

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class _MissingFile(Exception):
    """The repository is there and the file is not, though the server said "repository not
    found" (olah, serving git mirrors, answers every missing file so)."""


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
        """``filename`` in the local Hub cache, downloaded when needed; None for an optional file
        the repository does not have."""
        from huggingface_hub import hf_hub_download

        def download() -> Path:
            if not self.offline:
                self._head(filename, required=required)
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

    def weights_bytes(self, index: Path | None) -> int | None:
        """Bytes of the safetensors weights: the tensors' data_offsets summed over every shard header.

        The shards ``index`` (the fetched model.safetensors.index.json) names, else
        model.safetensors; only each shard's header is read, so the size is known without
        downloading weights. A repo without safetensors, or with a header that does not parse, has
        no answer (the size is a hint, not a requirement)."""
        from huggingface_hub import constants

        if index is not None:
            shards = _index_shards(index)
            if not shards:
                return None
        else:
            # HEAD first: olah answers a GET of a file its mirror lacks with a 500, not a 404.
            single = constants.SAFETENSORS_SINGLE_FILE
            if not self._with_retries(single, lambda: self._head(single, required=False), required=False):
                return None
            shards = [single]
        total = 0
        for shard in shards:
            read = partial(self._shard_bytes, shard)
            span = self._with_retries(f"the header of {shard}", read, required=False)
            if span is None:
                return None
            total += span
        return total or None

    def _shard_bytes(self, filename: str) -> int | None:
        return _tensor_bytes(self._header(filename))

    def tokenizer_files(
        self, names: Sequence[str], root: Path, *, max_bytes: int, deadline: float
    ) -> Path | None:
        """The directory holding those of ``names`` the repository has, downloaded under ``root``
        into one directory per commit (so a file is fetched once per revision, and a moved
        branch gets new ones); None when it has none of them.

        Bounded: a file above ``max_bytes`` (by the size the HEAD gives, then by what arrives) or
        not received by ``deadline`` (a ``time.monotonic()`` value) raises ``BoundExceeded``;
        each request has the retry policy's timeout, so a hub that stalls fails at the first
        that runs out."""
        directory: Path | None = None
        for name in names:
            if time.monotonic() > deadline:
                raise self._late(name)
            meta = self._with_retries(name, partial(self._head, name, required=False), required=False)
            if meta is None:
                continue
            directory = root / _repo_folder(self.model) / (meta.commit_hash or self.revision)
            target = directory / name
            if target.is_file():
                continue
            if meta.size is not None and meta.size > max_bytes:
                raise BoundExceeded(_too_large(name, self.model, meta.size, max_bytes))
            download = partial(self._download, name, target, max_bytes, deadline)
            self._with_retries(name, download, required=True)
        return directory

    def _download(self, filename: str, target: Path, max_bytes: int, deadline: float) -> None:
        """GET ``filename`` into ``target`` (written whole or not at all), within the bounds."""
        from huggingface_hub import get_session, hf_hub_url, hf_raise_for_status
        from huggingface_hub.utils import build_hf_headers  # type: ignore[attr-defined]

        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise self._late(filename)
        url = hf_hub_url(self.model, filename, revision=self.revision, endpoint=self.endpoint)
        target.parent.mkdir(parents=True, exist_ok=True)
        part = target.with_name(f".{target.name}.{os.getpid()}-{threading.get_ident()}.part")
        timeout = min(self.retry.request_timeout, remaining)
        try:
            with (
                get_session().stream(
                    "GET",
                    url,
                    headers=build_hf_headers(token=self.token),
                    timeout=timeout,
                    follow_redirects=True,
                ) as answer,
                part.open("wb") as out,
            ):
                hf_raise_for_status(answer)
                received = 0
                for chunk in answer.iter_bytes():
                    received += len(chunk)
                    if received > max_bytes:
                        raise BoundExceeded(_too_large(filename, self.model, received, max_bytes))
                    if time.monotonic() > deadline:
                        raise self._late(filename, f" ({received} bytes so far)")
                    out.write(chunk)
            os.replace(part, target)
        finally:
            part.unlink(missing_ok=True)

    def _header(self, filename: str) -> dict[str, Any] | None:
        """The JSON header of a safetensors file, None when the front of the file is not one."""
        first = self._front(filename, 0, HEADER_PROBE_BYTES)
        if len(first) < 8:
            return None
        (size,) = struct.unpack("<Q", first[:8])
        if size > MAX_HEADER_BYTES:
            return None
        raw = first[8 : 8 + size]
        if len(raw) < size:
            raw += self._front(filename, len(first), 8 + size - len(first))
        try:
            header = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError):
            return None
        return header if isinstance(header, dict) else None

    def _front(self, filename: str, start: int, count: int) -> bytes:
        """``count`` bytes of ``filename`` from ``start`` (fewer at its end), by a Range request.

        A server may ignore Range and send the whole file with 200 (olah does for the git
        repositories it mirrors): the body is then read only as far as needed and the connection
        dropped, so learning a 10 GB shard's size never downloads it."""
        from huggingface_hub import get_session, hf_hub_url, hf_raise_for_status

        # Public (in huggingface_hub.utils.__all__) but imported there without a re-export mypy sees.
        from huggingface_hub.utils import build_hf_headers  # type: ignore[attr-defined]

        url = hf_hub_url(self.model, filename, revision=self.revision, endpoint=self.endpoint)
        headers = {**build_hf_headers(token=self.token), "Range": f"bytes={start}-{start + count - 1}"}
        with get_session().stream("GET", url, headers=headers, timeout=self.retry.request_timeout) as answer:
            hf_raise_for_status(answer)
            skip = 0 if answer.status_code == 206 else start
            body = bytearray()
            for chunk in answer.iter_bytes():
                body += chunk
                if len(body) >= skip + count:
                    break
        return bytes(body[skip : skip + count])

    def _late(self, filename: str, detail: str = "") -> BoundExceeded:
        return BoundExceeded(
            f"{filename} of {self.model}@{self.revision} was not received in time{detail}", transient=True
        )

    def _head(self, filename: str, *, required: bool) -> HfFileMetadata:
        """HEAD ``filename``: its metadata when it is there.

        olah answers a file missing from a repository it serves with "repository not found"; for
        an optional file (looked up once config.json was found) that becomes ``_MissingFile`` if
        the repository answers. The real Hub says 404 EntryNotFound, with no second request."""
        from huggingface_hub import get_hf_file_metadata, hf_hub_url
        from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

        url = hf_hub_url(self.model, filename, revision=self.revision, endpoint=self.endpoint)
        try:
            return get_hf_file_metadata(
                url, token=self.token, timeout=self.retry.request_timeout, endpoint=self.endpoint
            )
        except RepositoryNotFoundError as exc:
            if required or isinstance(exc, GatedRepoError) or not self._repo_found():
                raise
            raise _MissingFile(filename) from exc

    def _repo_found(self) -> bool:
        """Whether the repository answers at this revision (the Hub API's revision call)."""
        from huggingface_hub import HfApi
        from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError

        api = HfApi(endpoint=self.endpoint, token=self.token)
        try:
            api.model_info(self.model, revision=self.revision, timeout=self.retry.request_timeout)
        except (RepositoryNotFoundError, RevisionNotFoundError):
            return False
        return True

    def _with_retries(self, filename: str, call: Callable[[], _R], *, required: bool) -> _R | None:
        """``call()``, retried on transient failures; permanent ones raise at once (or give None
        for an optional file that is not there)."""
        from huggingface_hub.errors import FileMetadataError, HFValidationError

        # huggingface_hub re-exports its HTTP client as ``huggingface_hub.utils.httpx`` ("for
        # downstream libraries across major versions"; in __all__, built at run time, so mypy cannot
        # see it). Its HTTPError is the base of the hub's status errors and of the connection and
        # timeout errors, which none of huggingface_hub's own classes wraps.
        from huggingface_hub.utils import httpx  # type: ignore[attr-defined]

        failures = (httpx.HTTPError, HFValidationError, FileMetadataError, OSError, _MissingFile)
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

        return isinstance(exc, (RemoteEntryNotFoundError, _MissingFile)) or (
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

        if isinstance(exc, (RemoteEntryNotFoundError, _MissingFile)):
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


def _repo_folder(model: str) -> str:
    """The Hub cache's folder name for a model repository (``models--org--name``)."""
    return "--".join(("models", *model.split("/")))


def _too_large(filename: str, model: str, size: int, limit: int) -> str:
    return f"{filename} of {model} is {size / 2**20:.1f} MiB, above the {limit // 2**20} MiB limit"


def _index_shards(index: Path) -> list[str] | None:
    """The shard files a model.safetensors.index.json names, None when it is not an index."""
    try:
        weight_map = json.loads(index.read_text()).get("weight_map")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return None
    if not isinstance(weight_map, dict):
        return None
    return sorted({str(shard) for shard in weight_map.values()})


def _tensor_bytes(header: dict[str, Any] | None) -> int | None:
    """Bytes of the tensors a safetensors header describes (None when it is malformed)."""
    if header is None:
        return None
    total = 0
    for name, tensor in header.items():
        if name == "__metadata__":
            continue
        offsets = tensor.get("data_offsets") if isinstance(tensor, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)):
            return None
        total += offsets[1] - offsets[0]
    return total


def _http_status(exc: Exception) -> int | None:
    """The HTTP status of a huggingface_hub HTTP error (None for other failures)."""
    from huggingface_hub.errors import HfHubHTTPError

    response = exc.response if isinstance(exc, HfHubHTTPError) else None
    return None if response is None else int(response.status_code)

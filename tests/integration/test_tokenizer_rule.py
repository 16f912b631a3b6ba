"""The pairing check's tokenizer rule runs in the cluster, on tokenizer files the operator fetches
through the resource's hub: the demo's tiny pair passes it, a draft with another tokenizer fails.

The hub is olah serving copies of the sandbox's tiny models (built once, cached) and one more
draft: the accept-all draft with a tokenizer whose vocabulary differs from the verifier's.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sdeplib import apply
from specdeploy_sandbox import engine_env, tiny_models
from specdeploy_sandbox.model_hub import (
    ensure_hub_env,
    repo_dir,
)
from support.hub import running_hub
from support.kube import Kubectl, WaitFor, condition, get
from support.paths import REPO

pytestmark = pytest.mark.usefixtures("operator")

TINY_EXAMPLE = REPO / "manifests" / "examples" / "sandbox-tiny-eagle3.yaml"
OTHER_TOKENIZER = "sandbox/tiny-qwen3-eagle3-other-tokenizer"
GIT_ENV = {
    "GIT_AUTHOR_NAME": "specdeploy",
    "GIT_AUTHOR_EMAIL": "sandbox@specdeploy.invalid",
    "GIT_COMMITTER_NAME": "specdeploy",
    "GIT_COMMITTER_EMAIL": "sandbox@specdeploy.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(cwd: Path, *argv: str) -> None:
    env = {**os.environ, **GIT_ENV, "HOME": str(cwd)}
    subprocess.run(["git", *argv], cwd=cwd, env=env, check=True, capture_output=True)


def other_tokenizer(verifier: Path, draft: Path) -> None:
    """The verifier's tokenizer files in ``draft``, with two tokens' ids swapped."""
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (draft / name).write_bytes((verifier / name).read_bytes())
    tokenizer = json.loads((draft / "tokenizer.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    first, second = sorted(vocab)[:2]
    vocab[first], vocab[second] = vocab[second], vocab[first]
    (draft / "tokenizer.json").write_text(json.dumps(tokenizer))


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    models = tiny_models.ensure_models(engine_env.ensure_engine_env(io.StringIO()), io.StringIO())
    base = tmp_path_factory.mktemp("tokenizer-hub")
    mirrors, repos, home = base / "mirrors", base / "repos", base / "home"
    for directory in (repos, home):
        directory.mkdir()
    for model in (tiny_models.VERIFIER, tiny_models.ACCEPT_ALL):
        target = repo_dir(mirrors, model)
        target.parent.mkdir(parents=True, exist_ok=True)
        git(target.parent, "clone", "--quiet", str(models.local(model)), target.name)
    draft = repo_dir(mirrors, OTHER_TOKENIZER)
    git(draft.parent, "clone", "--quiet", str(models.local(tiny_models.ACCEPT_ALL)), draft.name)
    other_tokenizer(models.local(tiny_models.VERIFIER), draft)
    git(draft, "add", "--all")
    git(draft, "commit", "--quiet", "-m", "another tokenizer")

    with running_hub(ensure_hub_env(sys.stderr), base, mirrors, repos, home) as (endpoint, _):
        yield endpoint


def tiny_pair(name: str, speculator: str, endpoint: str) -> dict[str, Any]:
    """The demo's tiny example, named ``name``, with ``speculator`` and the test's hub."""
    body: dict[str, Any] = yaml.safe_load(TINY_EXAMPLE.read_text())
    body["metadata"]["name"] = name
    body["spec"]["speculator"]["model"] = speculator
    body["spec"]["modelAccess"] = {"endpoint": endpoint}
    return body


def tokenizer_check(kubectl: Kubectl, namespace: str, name: str) -> dict[str, Any] | None:
    checks = (get(kubectl, namespace, "sdep", name).get("status") or {}).get("pairing", {}).get("checks", [])
    return next((c for c in checks if c["name"] == "tokenizer"), None)


def test_the_demo_pair_passes_the_tokenizer_rule(
    kubectl: Kubectl, namespace: str, wait_for: WaitFor, hub: str
) -> None:
    apply(kubectl, namespace, tiny_pair("tiny", tiny_models.ACCEPT_ALL, hub))
    check = wait_for(lambda: tokenizer_check(kubectl, namespace, "tiny"), 120, "the tokenizer check")
    assert (check["status"], check["reason"]) == ("Passed", "Match"), check
    assert "chat template renders" in check["message"]


def test_a_draft_with_another_tokenizer_fails_it(
    kubectl: Kubectl, namespace: str, wait_for: WaitFor, hub: str
) -> None:
    apply(kubectl, namespace, tiny_pair("other", OTHER_TOKENIZER, hub))
    check = wait_for(lambda: tokenizer_check(kubectl, namespace, "other"), 120, "the tokenizer check")
    assert (check["status"], check["reason"]) == ("Failed", "TokenizerMismatch"), check
    assert "2 differ" in check["message"], check
    verdict = condition(get(kubectl, namespace, "sdep", "other"), "PairingVerified")
    assert (verdict["status"], verdict["reason"]) == ("False", "TokenizerMismatch"), verdict
    assert not get(kubectl, namespace, "deployments", "-l", "app.kubernetes.io/instance=other")["items"]

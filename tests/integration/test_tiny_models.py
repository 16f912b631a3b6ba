"""The tiny sandbox models are built offline and deterministically: a rebuild gives the same commits."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

from specdeploy_sandbox import engine_env, tiny_models


def _head(repo: Path) -> str:
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.strip()


def test_a_rebuild_gives_the_same_commits(tmp_path: Path) -> None:
    env = engine_env.ensure_engine_env(io.StringIO())
    cached = tiny_models.ensure_models(env, io.StringIO())
    rebuilt = tiny_models.ensure_models(env, io.StringIO(), root=tmp_path / "models")
    for model_id in tiny_models.MODEL_IDS:
        assert _head(rebuilt.local(model_id)) == _head(cached.local(model_id)), model_id
    speculator = (rebuilt.local(tiny_models.ACCEPT_ALL) / "config.json").read_text()
    assert f'"name_or_path": "{tiny_models.VERIFIER}"' in speculator

"""Files of the repository that tests read: the CRD, the examples, the chart."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CRD_FILE = REPO / "crds" / "specdeploy.io_speculativedeployments.yaml"
CRD_NAME = "speculativedeployments.specdeploy.io"
EXAMPLES = REPO / "manifests" / "examples"
# The seed pair (Qwen3-30B-A3B with its RedHatAI EAGLE-3 speculator) and the tiny pair a sandbox
# engine node serves with a real vLLM.
SEED_EXAMPLE = EXAMPLES / "qwen3-30b-a3b-instruct-2507-eagle3.yaml"
TINY_EXAMPLE = EXAMPLES / "sandbox-tiny-eagle3.yaml"

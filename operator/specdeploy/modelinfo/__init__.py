"""Model information: config.json facts, weight sizes and tokenizers of verifiers and speculators.

Found in a local directory, a ConfigMap, the built-in catalog or the Hugging Face Hub (the
resolver), and read through one set of config.json rules (``modelinfo.config``).
"""

from specdeploy.modelinfo.hub import RetryPolicy
from specdeploy.modelinfo.info import (
    InfoSource,
    ModelInfo,
    ModelUnavailable,
    UnavailableReason,
    config_problem,
    info_from_config,
    model_key,
)
from specdeploy.modelinfo.resolver import ModelResolver

__all__ = [
    "InfoSource",
    "ModelInfo",
    "ModelResolver",
    "ModelUnavailable",
    "RetryPolicy",
    "UnavailableReason",
    "config_problem",
    "info_from_config",
    "model_key",
]

"""The pairing check: does the speculator really match the verifier, and which pair does a spec mean.

draft (what a draft config says) -> rules and tokenizer (each check) -> report (the verdict) ->
shorthands (filling in a half-named pair and the published settings).
"""

from specdeploy.pairing.report import PairingReport
from specdeploy.pairing.rules import check_pair
from specdeploy.pairing.shorthands import (
    PairingError,
    ResolvedPair,
    check_resolved,
    effective_spec,
    resolve_pair,
)

__all__ = [
    "PairingError",
    "PairingReport",
    "ResolvedPair",
    "check_pair",
    "check_resolved",
    "effective_spec",
    "resolve_pair",
]

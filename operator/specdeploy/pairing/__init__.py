"""The pairing check: does the speculator really match the verifier, and which pair does a spec mean.

draft (what a draft config says) -> rules and tokenizer (each check) -> report (the verdict) ->
shorthands (filling in a half-named pair and the published settings).
"""

from specdeploy.pairing.draft import DraftFacts, draft_facts
from specdeploy.pairing.report import PairingReport
from specdeploy.pairing.rules import check_pair
from specdeploy.pairing.shorthands import (
    DEFAULT_SPECULATIVE_TOKENS,
    PairingError,
    ResolvedPair,
    check_resolved,
    effective_spec,
    resolve_pair,
)

__all__ = [
    "DEFAULT_SPECULATIVE_TOKENS",
    "DraftFacts",
    "PairingError",
    "PairingReport",
    "ResolvedPair",
    "check_pair",
    "check_resolved",
    "draft_facts",
    "effective_spec",
    "resolve_pair",
]

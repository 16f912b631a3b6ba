"""The pairing report: every rule's outcome, and the verdict that becomes PairingVerified."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from specdeploy import api

CheckStatus = Literal["Passed", "Failed", "Warning", "Skipped"]


@dataclass(frozen=True)
class PairingReport:
    """Outcome of every rule; ``verified`` becomes the PairingVerified condition."""

    verifier_id: str
    speculator_id: str
    verified: api.ConditionStatus
    reason: str
    message: str
    checks: list[api.CheckResult]
    warnings: list[str] = field(default_factory=list)

    def check(self, name: str) -> api.CheckResult:
        return next(c for c in self.checks if c.name == name)

    def to_status(self) -> api.PairingStatus:
        return api.PairingStatus(verified=self.verified, reason=self.reason, checks=list(self.checks))


def check_result(name: str, status: CheckStatus, reason: str, message: str) -> api.CheckResult:
    return api.CheckResult(name=name, status=status, reason=reason, message=message)

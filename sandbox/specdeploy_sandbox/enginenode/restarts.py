"""When an exited container starts again: restart policy and kubelet's crash-loop back-off.

As kubelet does, the first restart is immediate; each further one waits twice as long as the
one before, from 10 s up to 5 minutes, and a run of 10 minutes forgives the past failures. Image
pull retries follow the same schedule.
"""

from __future__ import annotations

INITIAL_BACKOFF_S = 10.0
MAX_BACKOFF_S = 300.0
RESET_AFTER_RUNNING_S = 600.0


def should_restart(policy: str, exit_code: int) -> bool:
    """restartPolicy Always, OnFailure (exit code != 0) or Never."""
    if policy == "Never":
        return False
    return policy != "OnFailure" or exit_code != 0


def backoff_seconds(failures: int) -> float:
    """The wait before the next attempt after ``failures`` consecutive failures (>= 1)."""
    return min(INITIAL_BACKOFF_S * (1 << min(max(failures - 1, 0), 16)), MAX_BACKOFF_S)


def restart_delay(exits: int) -> float:
    """The wait before restarting a container that has exited ``exits`` times in a row (>= 1)."""
    return 0.0 if exits <= 1 else backoff_seconds(exits - 1)

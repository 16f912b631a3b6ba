"""The exit codes of every ``specdeploy`` verb, defined once.

The verbs share one meaning per code, so a script reads the same failure the same way from
``plan``, ``render``, ``check`` and ``bench``; README's command-line section has the table, and a
unit test keeps it equal to this enum.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """What a verb's exit status means, whichever verb it is."""

    OK = 0
    REFUSED = 1
    BAD_INPUT = 2
    NOT_READY = 3
    BASELINE_FAILED = 4
    LOAD_FAILED = 5
    TIMED_OUT = 6
    CLUSTER_UNREACHABLE = 7
    INTERRUPTED = 130

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


class CommandFailed(Exception):
    """A verb cannot go on: the message for the user and the exit code the verb ends with."""

    def __init__(self, code: ExitCode, message: str) -> None:
        super().__init__(message)
        self.code = code

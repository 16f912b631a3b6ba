"""The root cause of an engine that failed to start, picked from the end of its log.

An engine that fails while loading ends its log with a line that only points back ("Engine core
initialization failed. See root cause above."); the error that matters is the exception a
worker process printed a hundred lines earlier. Both engines are Python: the cause is the last
exception line of a traceback that is not one of the engine's pointers (``Engine.startup_pointers``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

# What an engine's logger and process prefix put before a line: "(EngineCore_DP0 pid=12) ",
# "ERROR 12-06 04:40:01 [core.py:866] ", "[2026-01-01 10:00:00 TP0] ".
_PREFIXES = (
    re.compile(r"^\([\w.-]+ pid=\d+\)\s?"),
    re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[[^\]]*\]\s?"),
    re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[^\]]*\]\s?"),
)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_TRACEBACK = "Traceback (most recent call last):"
# An exception line outside a traceback: "ValueError: ...", "torch.OutOfMemoryError: ...".
_EXCEPTION = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)(?::\s.*)?$")
# Chained exceptions are separated by these; they are not exception lines.
_CHAINING = ("During handling of the above exception", "The above exception was the direct cause")
MAX_CAUSE = 600


def _plain(line: str) -> str:
    line = _ANSI.sub("", line).rstrip()
    for prefix in _PREFIXES:
        line = prefix.sub("", line, count=1)
    return line


def _exception_lines(lines: Iterable[str]) -> list[str]:
    """Each traceback's exception line (the first unindented line after its frames), and any
    other line shaped like one."""
    found: list[str] = []
    in_traceback = False
    for raw in lines:
        line = _plain(raw)
        if _TRACEBACK in line:
            in_traceback = True
            continue
        if not line.strip() or line.startswith(_CHAINING):
            continue
        if in_traceback:
            if line[0].isspace() or line.lstrip().startswith("^"):
                continue
            found.append(line.strip())
            in_traceback = False
        elif _EXCEPTION.match(line.strip()):
            found.append(line.strip())
    return found


def root_cause(log: str, pointers: Sequence[str]) -> str | None:
    """The last exception in ``log`` that is not a pointer back to another (None: none found)."""
    causes = [line for line in _exception_lines(log.splitlines()) if not any(p in line for p in pointers)]
    if not causes:
        return None
    cause = causes[-1]
    return cause if len(cause) <= MAX_CAUSE else cause[: MAX_CAUSE - 3] + "..."

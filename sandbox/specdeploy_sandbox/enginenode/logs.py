"""Reading container log files: ``kubectl logs`` options and the termination message.

The termination message follows kubelet: the ``terminationMessagePath`` file (at most 4096
bytes); with ``FallbackToLogsOnError`` and an empty file, a failed container's last 80 log lines,
cut to their last 2048 bytes.
"""

from __future__ import annotations

import os
from pathlib import Path

MAX_MESSAGE_BYTES = 4096
FALLBACK_LINES = 80
FALLBACK_BYTES = 2048
# How far back a tail reads: enough for any sane tailLines without loading a huge log whole.
_TAIL_WINDOW_BYTES = 8 * 2**20


def tail_lines(data: bytes, lines: int) -> bytes:
    """The last ``lines`` lines of ``data`` (a final line without newline counts as one)."""
    if lines <= 0:
        return b""
    end = len(data) - 1 if data.endswith(b"\n") else len(data)
    start = end
    for _ in range(lines):
        start = data.rfind(b"\n", 0, start)
        if start == -1:
            return data
    return data[start + 1 :]


def read_log(path: Path, tail: int | None = None, limit_bytes: int | None = None) -> bytes:
    """A log file's content, its last ``tail`` lines, then at most ``limit_bytes`` from the start."""
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            window = size if tail is None else min(size, _TAIL_WINDOW_BYTES)
            handle.seek(size - window)
            data = handle.read(window)
    except FileNotFoundError:
        return b""
    if tail is not None:
        data = tail_lines(data, tail)
    if limit_bytes is not None:
        data = data[:limit_bytes]
    return data


def fallback_message(log: bytes) -> str:
    """Kubelet's termination message from logs: the last 80 lines, at most their last 2048 bytes."""
    return tail_lines(log, FALLBACK_LINES)[-FALLBACK_BYTES:].decode(errors="replace")


def termination_message(message_file: Path, log_file: Path, policy: str, exit_code: int) -> str:
    """The message of a container that ended with ``exit_code`` under terminationMessagePolicy."""
    try:
        with message_file.open("rb") as handle:
            message = handle.read(MAX_MESSAGE_BYTES).decode(errors="replace")
    except OSError:
        message = ""
    if not message and policy == "FallbackToLogsOnError" and exit_code != 0:
        message = fallback_message(read_log(log_file, tail=FALLBACK_LINES))
    return message

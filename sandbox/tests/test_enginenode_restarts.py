"""Restart policy, crash-loop back-off and the termination message rule of engine nodes."""

from __future__ import annotations

from pathlib import Path

import pytest

from specdeploy_sandbox.enginenode.logs import read_log, tail_lines, termination_message
from specdeploy_sandbox.enginenode.pod_worker import go_duration
from specdeploy_sandbox.enginenode.restarts import backoff_seconds, restart_delay, should_restart


def test_first_restart_is_immediate_then_back_off_doubles_to_five_minutes() -> None:
    assert [restart_delay(exits) for exits in range(1, 9)] == [0, 10, 20, 40, 80, 160, 300, 300]
    assert [backoff_seconds(failures) for failures in (1, 2, 3, 10, 1000)] == [10, 20, 40, 300, 300]


@pytest.mark.parametrize(
    ("policy", "code", "restart"),
    [("Always", 0, True), ("Always", 1, True), ("OnFailure", 0, False), ("OnFailure", 137, True),
     ("Never", 1, False), ("Never", 0, False)],
)  # fmt: skip
def test_restart_policy(policy: str, code: int, restart: bool) -> None:
    assert should_restart(policy, code) is restart


def test_back_off_reads_like_kubelet() -> None:
    assert [go_duration(s) for s in (10, 40, 160, 300)] == ["10s", "40s", "2m40s", "5m0s"]


def test_tail_lines() -> None:
    assert tail_lines(b"a\nb\nc\n", 2) == b"b\nc\n"
    assert tail_lines(b"a\nb\nc", 2) == b"b\nc"
    assert tail_lines(b"a\nb\n", 5) == b"a\nb\n"
    assert tail_lines(b"a\n", 0) == b""


def test_read_log_applies_tail_then_limit(tmp_path: Path) -> None:
    log = tmp_path / "0.log"
    log.write_bytes(b"".join(f"line {i}\n".encode() for i in range(10)))
    assert read_log(log) == log.read_bytes()
    assert read_log(log, tail=2) == b"line 8\nline 9\n"
    assert read_log(log, tail=2, limit_bytes=4) == b"line"
    assert read_log(tmp_path / "missing.log") == b""


def test_fallback_message_is_the_last_80_lines_cut_to_2048_bytes(tmp_path: Path) -> None:
    log = tmp_path / "0.log"
    log.write_bytes(b"".join(f"{i:04d}\n".encode() for i in range(200)))
    message = termination_message(tmp_path / "none", log, "FallbackToLogsOnError", 1)
    assert message.splitlines() == [f"{i:04d}" for i in range(120, 200)]
    log.write_bytes(b"x" * 5000 + b"\nlast\n")
    message = termination_message(tmp_path / "none", log, "FallbackToLogsOnError", 1)
    assert len(message.encode()) == 2048 and message.endswith("x\nlast\n")


def test_logs_are_used_only_for_failures_under_fallback_and_the_file_wins(tmp_path: Path) -> None:
    log = tmp_path / "0.log"
    log.write_text("boom\n")
    message_file = tmp_path / "termination-log"
    assert termination_message(message_file, log, "FallbackToLogsOnError", 0) == ""
    assert termination_message(message_file, log, "File", 1) == ""
    message_file.write_text("written by the app")
    assert termination_message(message_file, log, "FallbackToLogsOnError", 1) == "written by the app"
    assert termination_message(message_file, log, "File", 0) == "written by the app"
    message_file.write_text("y" * 5000)
    assert len(termination_message(message_file, log, "File", 0)) == 4096

"""The root cause of an engine that failed to start, picked from the end of its log.

``fixtures/logs/vllm-broken-draft.log`` is the real log of vLLM (the sandbox's CPU build) failing
to load the sandbox's broken tiny draft, trimmed to the last lines the operator reads; the SGLang
log is shaped as SGLang prints a scheduler failure (``sglang/srt/managers/scheduler.py``: the
traceback logged by the scheduler, then the launcher's own errors).
"""

from __future__ import annotations

from pathlib import Path

from specdeploy import engines
from specdeploy.controller.pods import LOG_TAIL_LINES
from specdeploy.engines.failures import MAX_CAUSE, root_cause

LOGS = Path(__file__).parent / "fixtures" / "logs"
VLLM_POINTER = "RuntimeError: Engine core initialization failed. See root cause above."

SGLANG_LOG = """\
[2026-01-01 10:00:00] server_args=ServerArgs(model_path='Qwen/Qwen3-8B', ...)
[2026-01-01 10:00:03 TP0] Load weight begin. avail mem=78.50 GB
[2026-01-01 10:00:04 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 6359, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args)
                ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 412, in load_model
    self.model = get_model(model_config=self.model_config)
ValueError: The draft model's hidden size 4096 does not match the target's 2048

[2026-01-01 10:00:04] Received sigquit from a child process. It usually means the child failed.
Traceback (most recent call last):
  File "/usr/lib/python3.12/runpy.py", line 198, in _run_module_as_main
RuntimeError: Initialization failed. Please see the error messages above.
"""


def test_vllm_the_weight_that_does_not_fit_not_the_pointer_after_it() -> None:
    """The real log: the cause sits far above the end, in the engine core's traceback."""
    log = (LOGS / "vllm-broken-draft.log").read_text()
    lines = log.splitlines()
    assert len(lines) <= LOG_TAIL_LINES and VLLM_POINTER in lines[-1]
    (at,) = [i for i, line in enumerate(lines) if "Tried to load weights" in line]
    assert len(lines) - at > 20, "the cause is not near the end: the termination message misses it"
    cause = engines.root_cause("vllm", log)
    assert cause is not None
    assert cause.startswith("AssertionError: Tried to load weights of size torch.Size([128, 128])"), cause
    assert "(EngineCore" not in cause and "ERROR" not in cause


def test_sglang_the_schedulers_exception_not_the_launchers() -> None:
    assert engines.root_cause("sglang", SGLANG_LOG) == (
        "ValueError: The draft model's hidden size 4096 does not match the target's 2048"
    )
    # Another engine's pointers are not skipped: its last exception is the launcher's.
    assert engines.root_cause("vllm", SGLANG_LOG) == (
        "RuntimeError: Initialization failed. Please see the error messages above."
    )


def test_the_outermost_of_chained_exceptions_and_plain_error_lines() -> None:
    chained = (
        "Traceback (most recent call last):\n"
        '  File "a.py", line 1, in <module>\n'
        "KeyError: 'fc.weight'\n"
        "\n"
        "The above exception was the direct cause of the following exception:\n"
        "\n"
        "Traceback (most recent call last):\n"
        '  File "b.py", line 2, in load\n'
        "ValueError: no weight fc.weight in the checkpoint\n"
    )
    assert root_cause(chained, ()) == "ValueError: no weight fc.weight in the checkpoint"
    colored = "\x1b[1;31mERROR 12-06 04:40:01 [core.py:1] torch.OutOfMemoryError: CUDA out of memory.\x1b[0m"
    assert root_cause(colored, ()) == "torch.OutOfMemoryError: CUDA out of memory."


def test_no_exception_no_cause_and_a_long_one_is_cut() -> None:
    assert root_cause("INFO loading\nINFO still loading\n", ()) is None
    assert root_cause("", ()) is None
    assert engines.root_cause("unknown-engine", f"{VLLM_POINTER}\n") == VLLM_POINTER
    long = root_cause("Traceback (most recent call last):\nValueError: " + "x" * 2000 + "\n", ())
    assert long is not None and len(long) == MAX_CAUSE and long.endswith("...")

"""One sandbox with an engine node, its model hub serving the tiny models by id, one operator
pointed at that hub, and two tiny pairs: shared by every end-to-end test, so each real engine
loads once per session (a load costs 90-130 s of this machine's 2 cores).

- The sandbox is the one ``specdeploy demo`` starts (``DEMO``: the packaged default nodes). Its
  engine node has three slots: the two pairs side by side, and a third for a benchmark's baseline
  or a test's own short-lived engine, with room for a benchmark's load Job. It sits beside the
  default simulated GPU nodes, which the demo's seed example needs.
- The operator is registered as the sandbox's own, as ``specdeploy demo`` starts it, so the demo
  test (last) finds the sandbox, the operator and the tiny example running, and ends it all with
  ``sandbox down``. It reads engine metrics every 5 s, so acceptance tests see a verdict within
  seconds of their traffic.
- The tests use the shared engines in a fixed order (``ORDER``): the first watches them load,
  the acceptance tests change only ``spec.acceptance`` (which leaves the engines running), the
  benchmarks start baselines beside them, one test deletes a pair, and the demo comes last.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from enginelib import ENGINE_READY_S, NS, PAIRS, apply_pairs, pod_ip, sdep_when
from specdeploy_sandbox import operator_process
from specdeploy_sandbox.cluster import Sandbox
from specdeploy_sandbox.operator_process import LocalOperator
from support.kube import Kubectl, WaitFor, install_crd
from support.sandboxes import DEMO, running

READ_INTERVAL_S = 5
# Test ids (or module prefixes of them) in the order they run; the rest of the suite keeps its
# order around them.
ORDER = (
    "test_real_engine.py::test_the_example_runs_real_vllm_with_speculative_decoding",
    "test_real_engine.py",
    "test_acceptance.py",
    "test_bench.py",
    "test_real_engine.py::test_deleting_a_pair_stops_every_engine_process_within_the_grace_period",
    "test_demo.py",
)


def _rank(item: pytest.Item) -> int:
    """The position in ORDER of the longest entry that names ``item``."""
    local = item.nodeid.split("/")[-1]
    matches = [(len(entry), index) for index, entry in enumerate(ORDER) if local.startswith(entry)]
    return max(matches)[1] if matches else len(ORDER)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The end-to-end tests in ORDER, in the slots they were collected in."""
    here = os.path.dirname(__file__)
    slots = [index for index, item in enumerate(items) if str(item.path).startswith(here + os.sep)]
    ordered = sorted((items[index] for index in slots), key=_rank)
    for index, item in zip(slots, ordered, strict=True):
        items[index] = item


@pytest.fixture(scope="package")
def engine_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    with running(DEMO, tmp_path_factory.mktemp("engine-sandbox"), f"e2e-engine-{os.getpid()}") as sandbox:
        yield sandbox


@pytest.fixture(scope="package")
def k(engine_sandbox: Sandbox, kubectl_binary: str) -> Kubectl:
    return Kubectl(kubectl_binary, engine_sandbox.kubeconfig)


@pytest.fixture(scope="package")
def wait(k: Kubectl) -> WaitFor:
    return WaitFor(k, NS)


@pytest.fixture(scope="package")
def engine_operator(engine_sandbox: Sandbox, k: Kubectl) -> Iterator[LocalOperator]:
    install_crd(k)
    running_operator = operator_process.start_registered(engine_sandbox, READ_INTERVAL_S, detach=False)
    try:
        yield running_operator
    finally:
        running_operator.stop()
        print(f"\n--- operator log (tail) ---\n{running_operator.log_tail()}")


@pytest.fixture(scope="package")
def pairs(engine_operator: LocalOperator, k: Kubectl, wait: WaitFor) -> dict[str, str]:
    """Both shared pairs Ready (applied here unless the first test already did); their pod IPs."""
    apply_pairs(k)
    for name in PAIRS:
        wait(lambda name=name: sdep_when(k, name, "Ready", "True"), ENGINE_READY_S, f"{name} to be Ready")
    return {name: pod_ip(k, name) for name in PAIRS}

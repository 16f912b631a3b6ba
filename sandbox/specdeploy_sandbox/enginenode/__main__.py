"""``python -m specdeploy_sandbox.enginenode``: run the agent of one engine node until SIGTERM."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path

from specdeploy_sandbox.enginenode.agent import Agent, Options
from specdeploy_sandbox.enginenode.images import load_image_map


def _runtime(text: str) -> tuple[str, Path]:
    name, equals, directory = text.partition("=")
    if not equals or not name or not directory:
        raise argparse.ArgumentTypeError(f"expected NAME=DIR, got {text!r}")
    return name, Path(directory)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m specdeploy_sandbox.enginenode", description=__doc__)
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--node", required=True, help="the Node this agent plays the kubelet of")
    parser.add_argument(
        "--state-dir", type=Path, required=True, help="pod directories, certificates, pgids.json"
    )
    parser.add_argument("--pod-cidr", required=True, help="the node's pod IPs, a range inside 127.0.0.0/8")
    parser.add_argument("--kubelet-port", type=int, required=True, help="port of the logs API on 127.0.0.1")
    parser.add_argument(
        "--runtime", type=_runtime, action="append", default=[], metavar="NAME=DIR",
        help="a runtime of the image map: NAME runs from the executables in DIR (repeatable)",
    )  # fmt: skip
    parser.add_argument(
        "--image-map", type=Path, default=None, help="default: the packaged sandbox-images.yaml"
    )
    parser.add_argument("--kubelet-version", default="v0.0.0-sandbox", help="reported in the node's nodeInfo")
    parser.add_argument("--log-level", default="INFO")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level, stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(threadName)s: %(message)s",
    )  # fmt: skip
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    options = Options(
        kubeconfig=args.kubeconfig, node=args.node, state_dir=args.state_dir, pod_cidr=args.pod_cidr,
        kubelet_port=args.kubelet_port, runtimes=dict(args.runtime), images=load_image_map(args.image_map),
        kubelet_version=args.kubelet_version,
    )  # fmt: skip
    agent = Agent(options)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: agent.stop())
    return agent.run()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

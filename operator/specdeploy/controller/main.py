"""Process entry of ``specdeploy run``: logging, metrics, the webhook server's certificate, then kopf."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
import tempfile
import uuid
from pathlib import Path

import kopf
from huggingface_hub.utils.tqdm import disable_progress_bars

from specdeploy.children import NO_DEFAULTS
from specdeploy.controller import certs, handlers, kopf_tuning, malloc_arenas, metrics
from specdeploy.controller.leadership import ElectionSettings
from specdeploy.controller.options import OperatorOptions
from specdeploy.modelinfo.hub import ENDPOINT_ENV, HubEndpointError, default_endpoint

log = logging.getLogger(__name__)


def apply_hub_endpoint(flag: str | None) -> str | None:
    """The operator-wide hub endpoint: ``--hub-endpoint`` wins over ``SPECDEPLOY_HUB_ENDPOINT``.

    The flag is written into this process's environment, where the resolver and the Deployment
    builder read the default (as ``specdeploy render`` does), so both see one value. Raises
    HubEndpointError for a value that is not an http(s) URL, before anything starts."""
    if flag is not None:
        os.environ[ENDPOINT_ENV] = flag
    return default_endpoint()


class AdmissionRefusals(logging.Filter):
    """kopf logs every refusal of the webhook at ERROR ("Webhook 'validate' failed permanently"):
    an invalid resource from a user, answered to that user, not an operator fault. Kept at INFO
    with --verbose, dropped otherwise."""

    def __init__(self, verbose: bool) -> None:
        super().__init__()
        self.verbose = verbose

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        refusal = message.startswith("Webhook ") and "failed permanently" in message
        if record.levelno == logging.ERROR and refusal:
            record.levelno, record.levelname = logging.INFO, "INFO"
            return self.verbose
        return True


def main(options: OperatorOptions) -> int:
    malloc_arenas.cap_arenas()
    logging.basicConfig(
        level=logging.DEBUG if options.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not options.verbose:
        # kopf logs every handled event, aiohttp every probe and webhook call, at INFO: thousands of
        # lines a minute on a busy cluster.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
        # The election library logs every failed renewal with the full HTTP response at INFO.
        logging.getLogger("leaderelection").setLevel(logging.WARNING)
    logging.getLogger("kopf.objects").addFilter(AdmissionRefusals(options.verbose))
    try:
        hub = apply_hub_endpoint(options.hub_endpoint)
    except HubEndpointError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    log.info("model hub: %s", hub or "HF_ENDPOINT, else the Hugging Face Hub (no operator default)")
    # The pairing check's hub reads (safetensors headers) draw tqdm bars: noise in a service log.
    disable_progress_bars()
    memo = handlers.OperatorMemo(
        read_secrets=options.read_token_secrets,
        pod_defaults=options.pod_defaults,
        node_pools=options.node_pools,
        node_wait=options.node_wait,
    )
    if options.pod_defaults != NO_DEFAULTS:
        log.info("engine pod defaults: %s", options.pod_defaults)
    if options.acceptance_interval > 0:
        memo.engine_metrics = handlers.EngineMetricsSettings(
            interval=options.acceptance_interval,
            timeout=options.acceptance_timeout,
            concurrency=options.acceptance_concurrency,
        )
    if options.leader_elect:
        memo.election = election_settings(options)
    if options.metrics_port:
        metrics.serve(options.probe_address, options.metrics_port)
    if options.webhook_port:
        cert_dir = options.webhook_cert_dir or Path(tempfile.mkdtemp(prefix="specdeploy-webhook-"))
        if not (cert_dir / "tls.crt").exists():
            certs.serving_certificate(cert_dir, [options.webhook_host or "localhost"])
        memo.webhook = handlers.WebhookServer(
            addr=options.webhook_address,
            port=options.webhook_port,
            host=options.webhook_host,
            certfile=cert_dir / "tls.crt",
            pkeyfile=cert_dir / "tls.key",
            cafile=cert_dir / "ca.crt" if (cert_dir / "ca.crt").exists() else None,
            manage_configuration=options.webhook_configure,
            client_ca=options.webhook_client_ca,
        )
        handlers.register_webhook()
    kopf_tuning.quiet_toggle_sets()
    kopf_tuning.strip_watched_objects()
    kopf_tuning.dispatch_directly(handlers.CHILD_WATCHES, handlers.IDENTITY_ONLY_KINDS)
    asyncio.run(
        kopf.operator(
            standalone=True,
            clusterwide=not options.namespaces,
            namespaces=options.namespaces,
            liveness_endpoint=f"http://{options.probe_address}:{options.probe_port}/healthz",
            memo=memo,
            stop_flag=memo.stop,
        )
    )
    return 1 if memo.lost_lease else 0


def election_settings(options: OperatorOptions) -> ElectionSettings:
    """The Lease of ``--leader-elect``: in the operator's namespace (the downward API's
    POD_NAMESPACE in a pod), held under the pod's name plus a random suffix (a restarted pod is a
    new candidate)."""
    lease = options.leader_election_lease_seconds
    return ElectionSettings(
        namespace=options.leader_election_namespace or os.environ.get("POD_NAMESPACE") or "default",
        name=options.leader_election_id,
        identity=f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}",
        lease_seconds=lease,
        renew_deadline_seconds=lease * 2 // 3,
        retry_seconds=2,
    )

"""One ``specdeploy bench`` run against the cluster: checks, the anchor, the baseline, the load
Job, its log, the summary on the resource, and the clean-up.

Everything the run creates hangs off one anchor Job that expires by itself (``manifests``), so
nothing outlives the run for longer than its timeout even when the process running it is
killed. Waits poll the few objects of one run every 2 s within that timeout.

One module, over 500 lines, because it is one sequence whose every step relies on the state the
earlier ones left (what was created, what to clean up); the pure parts are already apart
(``manifests``, ``load``, ``results``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn, TypeVar

from kubernetes.client.exceptions import ApiException

from specdeploy import api, children, engines
from specdeploy.children.labels import owner_reference
from specdeploy.controller.kube import KubeClient
from specdeploy.controller.pods import command_digest, pod_failure, project, serving
from specdeploy.engines import vllm
from specdeploy.exitcodes import CommandFailed, ExitCode
from specdeploy.planning.gpus import PRODUCT_LABEL
from specdeploy.speedup import manifests
from specdeploy.speedup.load import (
    BASELINE,
    SPECULATIVE,
    Load,
    Variant,
    command,
    draft_length_target,
    targets_plan,
)
from specdeploy.speedup.results import Comparison

EXIT_USAGE = ExitCode.BAD_INPUT
EXIT_NOT_READY = ExitCode.NOT_READY
EXIT_BASELINE = ExitCode.BASELINE_FAILED
EXIT_LOAD = ExitCode.LOAD_FAILED
EXIT_TIMEOUT = ExitCode.TIMED_OUT
EXIT_INTERRUPTED = ExitCode.INTERRUPTED
POLL_S = 2.0
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
PROGRESS_S = 30.0
T = TypeVar("T")


class BenchError(CommandFailed):
    """The benchmark run cannot go on."""


@dataclass(frozen=True)
class Options:
    """What the user asked for: the resource, the load, how long to wait, what to keep."""

    name: str
    load: Load
    keep_baseline: bool = False
    load_image: str | None = None
    timeout: int = 3600
    schedule_timeout: int = 120
    # Draft lengths measured besides the resource as it runs (``--tokens``; 0 is the baseline,
    # ``IDLE`` the draft loaded and drafting nothing).
    tokens: tuple[Variant, ...] = ()
    # Every engine copy of ``tokens`` at once, measured in turn with the resource and the
    # baseline in one load Job (``--interleave``), rather than one copy after the other.
    interleave: bool = False


def drafting(variant: Variant) -> str:
    """What an engine copy of ``--tokens`` does, in words."""
    return f"drafting {variant} tokens" if isinstance(variant, int) else "with the draft idle"


def say(message: str) -> None:
    print(f"==> {message}", file=sys.stderr, flush=True)


def _condition(body: dict[str, Any], type_: str) -> dict[str, Any]:
    found = [c for c in (body.get("status") or {}).get("conditions") or [] if c.get("type") == type_]
    return found[0] if found else {}


class Session:
    """One benchmark of one resource; ``cleanup`` removes what it created, whatever happened."""

    def __init__(self, kube: KubeClient, namespace: str, options: Options) -> None:
        self.kube = kube
        self.namespace = namespace
        self.options = options
        self.name = options.name
        self.deadline = time.monotonic() + options.timeout
        self.resource: dict[str, Any] = {}
        self.deployment: dict[str, Any] = {}
        self.run_job: dict[str, Any] | None = None
        # The baseline this run started or took over (None when it measures against another
        # resource's kept one, which it leaves as it is), and the name of the one it measures.
        self.baseline: tuple[dict[str, Any], dict[str, Any]] | None = None
        self.baseline_name = manifests.baseline_name(self.name)
        # The load with its lengths fitted to the resource's context once ``start`` has read it.
        self.load = options.load
        # Whether the resource carries this run's hold on adaptive speculation.
        self.holding = False

    @property
    def shares_baseline(self) -> bool:
        """Whether the run measures against another resource's kept baseline."""
        return self.baseline_name != manifests.baseline_name(self.name)

    # -- reading the cluster ----------------------------------------------------------------------

    def _dict(self, obj: Any) -> dict[str, Any]:
        """A client model as the plain dict the apiserver sent (what the builders read)."""
        sanitize: Callable[[Any], dict[str, Any]] = self.kube.api_client.sanitize_for_serialization
        return sanitize(obj)

    def _create_job(self, manifest: dict[str, Any]) -> dict[str, Any]:
        body: Any = manifest
        return self._dict(self.kube.batch.create_namespaced_job(self.namespace, body))

    def _read(self, read: Callable[..., Any], name: str) -> dict[str, Any] | None:
        try:
            return self._dict(read(name, self.namespace))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _pods(self, selector: dict[str, str]) -> list[dict[str, Any]]:
        labels = ",".join(f"{k}={v}" for k, v in selector.items())
        found = self.kube.core.list_namespaced_pod(self.namespace, label_selector=labels)
        return [self._dict(pod) for pod in found.items]

    def _resource(self) -> dict[str, Any]:
        """The SpeculativeDeployment; BenchError naming the namespace looked in when there is none."""
        try:
            body: Any = self.kube.custom.get_namespaced_custom_object(
                api.GROUP, api.VERSION, self.namespace, api.PLURAL, self.name
            )
        except ApiException as exc:
            if exc.status == 404:
                raise BenchError(
                    EXIT_USAGE, f"no SpeculativeDeployment {self.name!r} in namespace {self.namespace!r}"
                ) from exc
            raise
        resource: dict[str, Any] = body
        return resource

    def _serving(self, resource: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """The resource's Deployment and one Ready engine pod running the command status shows."""
        ready = _condition(resource, "Ready")
        status = resource.get("status") or {}
        where = f"SpeculativeDeployment {self.namespace}/{self.name}"
        if ready.get("status") != "True":
            raise BenchError(
                EXIT_NOT_READY,
                f"{where} is not Ready (Ready={ready.get('status', 'Unknown')}, "
                f"{ready.get('reason', 'no status yet')}: {ready.get('message', '')}); "
                "a benchmark needs it serving",
            )
        if status.get("observedGeneration") != resource["metadata"].get("generation"):
            raise BenchError(EXIT_NOT_READY, f"{where} has a spec change the operator has not rolled out yet")
        deployment = self._read(self.kube.apps.read_namespaced_deployment, self.name)
        pods = self._pods(
            {children.INSTANCE_LABEL: self.name, children.MANAGED_BY_LABEL: children.MANAGED_BY}
        )
        views = serving([project(p) for p in pods], status.get("command") or [])
        if deployment is None or not views:
            raise BenchError(EXIT_NOT_READY, f"{where} has no Ready engine pod running its current command")
        pod = next(p for p in pods if p["metadata"]["name"] == views[0].name)
        return deployment, pod

    # -- waiting ----------------------------------------------------------------------------------

    def _until(self, what: str, check: Callable[[], T | None]) -> T:
        """Poll ``check`` until it returns a value, within the run's deadline."""
        last_said = time.monotonic()
        while True:
            found = check()
            if found is not None:
                return found
            now = time.monotonic()
            if now > self.deadline:
                raise BenchError(EXIT_TIMEOUT, f"timed out after {self.options.timeout}s waiting for {what}")
            if now - last_said > PROGRESS_S:
                say(f"still waiting for {what}")
                last_said = now
            time.sleep(POLL_S)

    def _unschedulable(self, pod: dict[str, Any]) -> str | None:
        """The scheduler's message while ``pod`` waits for a node; None once it has one."""
        scheduled = _condition(pod, "PodScheduled")
        if scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable":
            return str(scheduled.get("message") or "no node fits")
        return None

    def _free_gpus(self, product: str | None) -> str:
        """Free GPUs per node of ``product`` now (allocatable minus what running pods request)."""
        selector = f"{PRODUCT_LABEL}={product}" if product else None
        free = []
        for node in self._dict(self.kube.core.list_node(label_selector=selector))["items"]:
            allocatable = int(node["status"].get("allocatable", {}).get(api.GPU_RESOURCE, "0"))
            if not allocatable:
                continue
            running = f"spec.nodeName={node['metadata']['name']},status.phase!=Succeeded,status.phase!=Failed"
            pods = self._dict(self.kube.core.list_pod_for_all_namespaces(field_selector=running))["items"]
            used = sum(
                int(((c.get("resources") or {}).get("requests") or {}).get(api.GPU_RESOURCE, "0"))
                for pod in pods
                for c in pod["spec"]["containers"]
            )
            free.append(f"{node['metadata']['name']}: {allocatable - used} of {allocatable}")
        return ", ".join(free) if free else "no node has any"

    def _cannot_schedule(self, what: str, pod: dict[str, Any], message: str, code: ExitCode) -> NoReturn:
        limits = [((c.get("resources") or {}).get("limits") or {}) for c in pod["spec"]["containers"]]
        gpus = next((found[api.GPU_RESOURCE] for found in limits if api.GPU_RESOURCE in found), None)
        if gpus is None:
            raise BenchError(code, f"the {what} cannot be scheduled: {message}")
        product = ((self.resource.get("status") or {}).get("plan") or {}).get("gpuProduct")
        needs = f"{gpus} free {api.GPU_RESOURCE}" + (f" ({product})" if product else "") + " on one node"
        raise BenchError(
            code,
            f"the {what} cannot be scheduled: it needs {needs}, the same as one replica of "
            f"{self.name}; free now: {self._free_gpus(product)}. The scheduler says: {message}",
        )

    def _watch_pod(self, what: str, selector: dict[str, str], code: ExitCode, ready: bool) -> dict[str, Any]:
        """The pod of ``selector`` once Ready (``ready``) or finished; BenchError when it cannot
        be scheduled within --schedule-timeout or fails to start."""

        placed = [time.monotonic()]

        def check() -> dict[str, Any] | None:
            pods = [p for p in self._pods(selector) if not p["metadata"].get("deletionTimestamp")]
            if not pods:
                return None
            pod = pods[0]
            unschedulable = self._unschedulable(pod)
            if unschedulable is None:
                placed[0] = time.monotonic()
            elif time.monotonic() - placed[0] > self.options.schedule_timeout:
                self._cannot_schedule(what, pod, unschedulable, code)
            view = project(pod)
            failure = pod_failure(view)
            if failure is not None:
                raise BenchError(code, f"the {what} fails ({failure.reason}): {failure.message}")
            finished = view.phase in ("Succeeded", "Failed")
            return pod if (view.ready if ready else finished) else None

        return self._until(f"the {what}", check)

    # -- the run ----------------------------------------------------------------------------------

    def start(self) -> dict[str, Any]:
        """Checks, then the anchor Job; returns the speculative engine pod to measure."""
        self.resource = self._resource()
        self.deployment, pod = self._serving(self.resource)
        self._fit_lengths()
        self._check_draft_lengths()
        existing = self._read(self.kube.batch.read_namespaced_job, manifests.run_name(self.name))
        if existing is not None:
            if not (_condition(existing, "Complete") or _condition(existing, "Failed")):
                raise BenchError(
                    EXIT_USAGE,
                    f"a benchmark of {self.name} is already running (Job {self.namespace}/"
                    f"{existing['metadata']['name']}); wait for it, or stop it with "
                    f"kubectl delete job -n {self.namespace} {existing['metadata']['name']}",
                )
            self._delete_job(existing["metadata"]["name"])
            previous = existing["metadata"]["name"]
            self._until(
                "the previous run to be removed",
                lambda: self._gone(self.kube.batch.read_namespaced_job, previous),
            )
        anchor = manifests.run_job(self.resource, self._load_image(), self.options.timeout)
        self.run_job = self._create_job(anchor)
        self._hold()
        return pod

    def _annotate(self, annotations: dict[str, str | None]) -> None:
        patch = {"metadata": {"annotations": annotations}}
        self.kube.custom.patch_namespaced_custom_object(
            api.GROUP, api.VERSION, self.namespace, api.PLURAL, self.name, patch
        )

    def _hold(self) -> None:
        """Mark the resource as measured until the run expires: the operator's adaptive
        speculation rolls out no other schedule meanwhile (a rollout mid-run would measure two
        commands as one)."""
        until = datetime.now(UTC) + timedelta(seconds=self.options.timeout)
        self._annotate({api.BENCHMARK_RUNNING_ANNOTATION: until.strftime(api.TIME_FORMAT)})
        self.holding = True

    def _fit_lengths(self) -> None:
        """Unset lengths fitted to the context the engines serve; a request longer than that
        would only fail inside the Job."""
        spec = self.resource.get("spec") or {}
        planned = (self.resource.get("status") or {}).get("plan") or {}
        limit = spec.get("maxModelLen") or planned.get("maxModelLen")
        asked = self.options.load
        self.load = load = asked.fit(limit)
        assert load.input_len is not None and load.output_len is not None
        tokens = load.input_len + load.output_len
        if limit and tokens > limit:
            raise BenchError(
                EXIT_USAGE,
                f"--input-len {load.input_len} + --output-len {load.output_len} = "
                f"{tokens} tokens per request, more than the {limit} that {self.name} serves "
                "(its maxModelLen)",
            )
        if load != asked.fit(None):
            say(
                f"requests of {load.input_len}+{load.output_len} tokens: the defaults halved to fit the "
                f"{limit}-token context of {self.name} (--input-len and --output-len to choose)"
            )

    def _gone(self, read: Callable[..., Any], name: str) -> bool | None:
        return True if self._read(read, name) is None else None

    def _load_image(self) -> str:
        if self.options.load_image:
            return str(self.options.load_image)
        template = self.deployment["spec"]["template"]["spec"]
        engine = next(c for c in template["containers"] if c["name"] == children.ENGINE_CONTAINER)
        if self.deployment["metadata"]["labels"].get(children.ENGINE_LABEL) == "vllm":
            return str(engine["image"])
        return engines.engine_for("vllm").default_image

    def _owner(self) -> dict[str, Any]:
        assert self.run_job is not None
        return (
            owner_reference(self.resource)
            if self.options.keep_baseline
            else manifests.job_owner(self.run_job)
        )

    def _shared_baseline(self, wanted: str) -> dict[str, Any] | None:
        """Another resource's kept baseline that runs the very pod this run's baseline would."""
        found = self.kube.apps.list_namespaced_deployment(
            self.namespace, label_selector=manifests.BASELINES_SELECTOR
        )
        return manifests.kept_baseline_like([self._dict(d) for d in found.items], wanted)

    def start_baseline(self) -> dict[str, Any]:
        """The baseline Deployment, once Ready: this resource's kept one when its template is
        unchanged, else another resource's kept one that runs the same pod, else a new one."""
        deployment, service = manifests.baseline(self.deployment, self.name, self._owner())
        name = deployment["metadata"]["name"]
        found = self._read(self.kube.apps.read_namespaced_deployment, name)
        wanted = deployment["metadata"]["annotations"][manifests.TEMPLATE_HASH_ANNOTATION]
        shared = self._shared_baseline(wanted) if found is None else None
        if shared is not None:
            meta = shared["metadata"]
            self.baseline_name = meta["name"]
            say(
                f"reusing the kept baseline {self.namespace}/{meta['name']} of "
                f"{meta['labels'][manifests.BENCHMARK_OF_LABEL]}: the same pod without the speculator"
            )
            return self._watch_pod(
                "baseline", shared["spec"]["selector"]["matchLabels"], EXIT_BASELINE, ready=True
            )
        if found is not None:
            kept = (found["metadata"].get("annotations") or {}).get(manifests.TEMPLATE_HASH_ANNOTATION)
            if kept == wanted:
                say(f"reusing the kept baseline {self.namespace}/{name}")
            else:
                say(f"replacing the baseline {self.namespace}/{name}: {self.name} changed since it was kept")
                self.kube.apps.delete_namespaced_deployment(
                    name, self.namespace, propagation_policy="Foreground"
                )
                read = self.kube.apps.read_namespaced_deployment
                self._until(f"the old baseline {name} to be removed", lambda: self._gone(read, name))
        else:
            say(f"starting the baseline {self.namespace}/{name} (the same engine without the speculator)")
        self.baseline = (deployment, service)
        self.kube.apply(deployment)
        self.kube.apply(service)
        selector = deployment["spec"]["selector"]["matchLabels"]
        return self._watch_pod("baseline", selector, EXIT_BASELINE, ready=True)

    def measure(self, speculative_pod: dict[str, Any], baseline_pod: dict[str, Any]) -> str:
        """Run the load Job against the baseline and the resource to the end; its log."""
        targets = ((BASELINE, self._url(baseline_pod)), (SPECULATIVE, self._url(speculative_pod)))
        return self._load(targets, "", "baseline then speculative")

    def _url(self, pod: dict[str, Any]) -> str:
        port = next(
            p["containerPort"]
            for c in pod["spec"]["containers"]
            if c["name"] == children.ENGINE_CONTAINER
            for p in c["ports"]
            if p["name"] == children.ENGINE_PORT_NAME
        )
        return f"http://{pod['status']['podIP']}:{port}"

    def _load(self, targets: tuple[tuple[str, str], ...], suffix: str, order: str) -> str:
        """Run one load Job over ``targets`` at every concurrency to the end; its log."""
        engine = self.deployment["metadata"]["labels"][children.ENGINE_LABEL]
        status = self.resource.get("status") or {}
        spec = self.resource.get("spec") or {}
        load = self.load
        model = spec.get("servedModelName") or status["verifier"]
        driver_plan = targets_plan(load, engine, model, status["verifier"], targets)
        assert self.run_job is not None
        remaining = max(1, int(self.deadline - time.monotonic()))
        job = manifests.load_job(
            self.deployment, self.name, manifests.job_owner(self.run_job), self._load_image(),
            command(driver_plan), remaining, suffix,
        )  # fmt: skip
        self._create_job(job)
        say(
            f"load Job {self.namespace}/{job['metadata']['name']}: "
            f"{'/'.join(str(load.prompts_at(c)) for c in load.concurrencies)} requests of "
            f"{load.input_len}+{load.output_len} tokens at concurrency "
            f"{','.join(map(str, load.concurrencies))}, {order}"
        )
        # The Job controller's own label: a run's load Jobs share the run's labels.
        selector = {**job["spec"]["template"]["metadata"]["labels"], JOB_NAME_LABEL: job["metadata"]["name"]}
        pod = self._watch_pod("load Job", selector, EXIT_LOAD, ready=False)
        log = str(
            self.kube.core.read_namespaced_pod_log(
                pod["metadata"]["name"], self.namespace, container=manifests.LOAD_CONTAINER
            )
        )
        if pod["status"]["phase"] != "Succeeded":
            tail = "\n".join(log.splitlines()[-25:])
            raise BenchError(EXIT_LOAD, f"the load Job failed; the end of its log:\n{tail}")
        return log

    def command_digest(self) -> str:
        """The digest of the command the resource ran while measured (the operator tells a
        benchmark of what runs now from one of an earlier command by it)."""
        return command_digest((self.resource.get("status") or {}).get("command") or [])

    def _own_draft_length(self) -> int | None:
        """The draft length the resource runs at every batch size, None when a schedule varies it."""
        config = vllm.running_config((self.resource.get("status") or {}).get("command") or [])
        if config is None or vllm.SCHEDULE_KEY in config:
            return None
        return int(config["num_speculative_tokens"])

    def _check_draft_lengths(self) -> None:
        """``--tokens`` on an engine that can run them, within the draft length the resource allocates."""
        if not self.options.tokens:
            return
        engine = self.deployment["metadata"]["labels"].get(children.ENGINE_LABEL)
        config = vllm.running_config((self.resource.get("status") or {}).get("command") or [])
        if engine != "vllm":
            raise BenchError(EXIT_USAGE, f"--tokens needs a vLLM engine; {self.name} runs {engine}")
        if config is None:
            raise BenchError(
                EXIT_USAGE,
                f"--tokens varies the draft length of the engine's {vllm.SPECULATIVE_CONFIG}, and "
                f"{self.name} runs none: speculation is turned off (status.speculation.appliedSchedule). "
                "Benchmark it without --tokens, or set spec.speculator.adaptive.policy to Recommend first",
            )
        longest = int(config["num_speculative_tokens"])
        over = [k for k in self.options.tokens if isinstance(k, int) and k > longest]
        if over:
            raise BenchError(
                EXIT_USAGE,
                f"--tokens {','.join(map(str, over))}: {self.name} drafts at most {longest} tokens "
                "(spec.speculator.numSpeculativeTokens), and acceptance is measured per position up to that",
            )

    def _copies(self) -> tuple[dict[Variant, str | None], list[Variant]]:
        """(None for each length of ``--tokens`` measured without a copy: 0, the baseline, and the
        length the resource itself drafts at every batch size; the lengths that need one)."""
        own = self._own_draft_length()
        measured: dict[Variant, str | None] = {k: None for k in self.options.tokens if k in (0, own)}
        return measured, [k for k in self.options.tokens if k not in measured]

    def _start_copy(self, tokens: Variant) -> tuple[str, dict[str, str]]:
        """Start the engine copy drafting ``tokens``, owned by the anchor; (its name, its selector)."""
        deployment, service = manifests.draft_length(
            self.deployment, self.name, manifests.job_owner(self._anchor()), tokens
        )
        name = deployment["metadata"]["name"]
        say(f"starting {self.namespace}/{name}: the engine {drafting(tokens)} at every batch size")
        self.kube.apply(deployment)
        self.kube.apply(service)
        return name, deployment["spec"]["selector"]["matchLabels"]

    def _copy_ready(self, tokens: Variant, selector: dict[str, str]) -> tuple[str, str]:
        """(target, URL) of the copy drafting ``tokens`` once its pod is Ready."""
        pod = self._watch_pod(f"engine {drafting(tokens)}", selector, EXIT_BASELINE, ready=True)
        return draft_length_target(tokens), self._url(pod)

    def measure_draft_lengths(self) -> dict[Variant, str | None]:
        """Each draft length of ``--tokens``: one engine copy at a time, started, loaded and
        removed before the next (one replica's GPUs beyond the resource's), after the baseline is
        gone unless kept. The log of each copy's load Job; None for the lengths ``_copies``
        measures without one."""
        logs, copies = self._copies()
        if copies and self.baseline is not None and not self.options.keep_baseline:
            self._remove(self.baseline[0]["metadata"]["name"], "the baseline")
            self.baseline = None
        for tokens in copies:
            name, selector = self._start_copy(tokens)
            target = self._copy_ready(tokens, selector)
            logs[tokens] = self._load((target,), f"-{target[0]}", drafting(tokens))
            self._remove(name, f"the engine {drafting(tokens)}")
        return logs

    def measure_together(
        self, speculative_pod: dict[str, Any], baseline_pod: dict[str, Any]
    ) -> tuple[str, dict[Variant, str | None]]:
        """``--interleave``: every engine copy of ``--tokens`` started at once (one replica's GPUs
        each, beyond the resource's and the baseline's), then one load Job taking the baseline,
        the resource and each copy in turn at every concurrency, so that every figure of a level
        is measured in the same minutes. (The log, the log for each copy, None for the others.)
        The copies go with the anchor at clean-up."""
        logs, copies = self._copies()
        started = [(tokens, self._start_copy(tokens)[1]) for tokens in copies]
        targets = (
            (BASELINE, self._url(baseline_pod)),
            (SPECULATIVE, self._url(speculative_pod)),
            *(self._copy_ready(tokens, selector) for tokens, selector in started),
        )
        log = self._load(targets, "", "every engine in turn")
        return log, {**logs, **{tokens: log for tokens in copies}}

    def _anchor(self) -> dict[str, Any]:
        assert self.run_job is not None
        return self.run_job

    def _remove(self, name: str, what: str) -> None:
        """Delete an engine copy of the run and wait for its pods to go, freeing its GPUs."""
        self.kube.apps.delete_namespaced_deployment(name, self.namespace, propagation_policy="Foreground")
        read = self.kube.apps.read_namespaced_deployment
        self._until(f"{what} to be removed", lambda: self._gone(read, name))

    def record(self, summary: str, event: tuple[str, str, str]) -> None:
        """The summary annotation on the resource with the run's hold taken off in the same write
        (the operator's next pass judges the new benchmark at once), and the Event."""
        self._annotate({manifests.SUMMARY_ANNOTATION: summary, api.BENCHMARK_RUNNING_ANNOTATION: None})
        self.holding = False
        self.kube.post_event(self.resource, *event)

    def _delete_job(self, name: str) -> None:
        try:
            self.kube.batch.delete_namespaced_job(name, self.namespace, propagation_policy="Background")
        except ApiException as exc:
            if exc.status != 404:
                raise

    def cleanup(self) -> None:
        """Hand a kept baseline to the resource, then delete the anchor: the GC does the rest."""
        if self.run_job is None:
            return
        if self.holding:
            self._annotate({api.BENCHMARK_RUNNING_ANNOTATION: None})
            self.holding = False
        if self.options.keep_baseline and self.baseline is not None:
            for manifest in self.baseline:
                self.kube.apply(manifest)
            say(f"kept the baseline {self.namespace}/{self.baseline[0]['metadata']['name']}")
        self._delete_job(self.run_job["metadata"]["name"])
        kept = self.options.keep_baseline or self.shares_baseline
        say("removed the run's Jobs" + ("" if kept else " and the baseline"))
        self.run_job = None

    def report(self, comparison: Comparison) -> dict[str, Any]:
        """The JSON report: the resource, what was compared, the load, and the comparison."""
        status = self.resource.get("status") or {}
        planned = status.get("plan") or {}
        template = self.deployment["spec"]["template"]["spec"]
        engine = next(c for c in template["containers"] if c["name"] == children.ENGINE_CONTAINER)
        return {
            "name": self.name,
            "namespace": self.namespace,
            "engine": status.get("engine"),
            "image": engine["image"],
            "verifier": status.get("verifier"),
            "speculator": status.get("speculator"),
            "tensorParallelSize": status.get("tensorParallelSize"),
            "gpuProduct": planned.get("gpuProduct"),
            "gpusPerReplica": planned.get("gpusPerReplica"),
            "baseline": {
                "name": self.baseline_name,
                "kept": self.options.keep_baseline or self.shares_baseline,
            },
            "load": self.load.describe(),
            **comparison.to_json(),
        }

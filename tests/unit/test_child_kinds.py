"""The table of child kinds (``children.CHILD_KINDS``) against what uses it: the manifests the
builders produce, the watches and indices kopf registers, the API calls that write each kind and
the RBAC the install grants (no cluster)."""

from __future__ import annotations

import inspect
from typing import Any

import kopf
import pytest
import yaml

from specdeploy import children
from specdeploy.children import CHILD_KINDS, ChildKind
from specdeploy.controller import handlers
from specdeploy.controller.cached import pack
from specdeploy.controller.kube import KubeClient
from support.paths import REPO
from test_multi_node import LLAMA_ON_TWO_NODES, desired

INSTALL_YAML = REPO / "manifests" / "install.yaml"
# Two replicas, so the PodDisruptionBudget is built too; one node per replica, then two.
ONE_NODE = {**LLAMA_ON_TWO_NODES, "parallelism": {"nodes": 1, "tensor": 8}}
LAYOUTS = {"one node": ONE_NODE, "two nodes": LLAMA_ON_TWO_NODES}


def _ids(kinds: tuple[ChildKind, ...]) -> list[str]:
    return [kind.kind for kind in kinds]


def test_the_table_names_each_kind_once_and_its_engine_kinds_in_order() -> None:
    assert len(children.BY_KIND) == len(CHILD_KINDS)
    assert _ids(children.ENGINE_KINDS) == ["Deployment", "LeaderWorkerSet"]
    # The apply order of a pass: the engine child first, the Service in front of it, its budget.
    assert _ids(CHILD_KINDS) == ["Deployment", "LeaderWorkerSet", "Service", "PodDisruptionBudget"]


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_the_pipeline_builds_one_manifest_per_wanted_kind_with_the_tables_api_version(
    layout: dict[str, Any],
) -> None:
    result = desired(layout)
    assert not result.blocked, result.message
    assert list(result.children) == [k.kind for k in CHILD_KINDS if k.kind in result.children]
    for kind, manifest in result.children.items():
        assert manifest["kind"] == kind
        assert manifest["apiVersion"] == children.BY_KIND[kind].api_version
    assert result.engine_set is not None and children.BY_KIND[result.engine_set["kind"]].engine


def test_every_kind_in_the_table_is_built_by_some_layout_and_nothing_else() -> None:
    built = {kind for layout in LAYOUTS.values() for kind in desired(layout).children}
    assert built == set(children.BY_KIND)


def test_every_kind_is_watched_and_indexed_by_the_handlers() -> None:
    registry = kopf.OperatorRegistry()
    handlers.register_children(registry)
    indices, watches = registry._indexing.get_all_handlers(), registry._watching.get_all_handlers()
    indexed = {(h.id, h.selector.group, h.selector.version, h.selector.any_name) for h in indices}
    watched = {(h.fn, h.selector.group, h.selector.version, h.selector.any_name) for h in watches}
    for kind in CHILD_KINDS:
        assert (handlers.child_index(kind), kind.group, kind.version, kind.plural) in indexed
        assert (handlers.on_child, kind.group, kind.version, kind.plural) in watched
        assert handlers.child_index(kind) in handlers.INDICES
    assert all(h.labels == handlers.MANAGED for h in [*indices, *watches])


def test_the_index_view_finds_each_kind_in_its_own_index() -> None:
    key = ("ns", "pair")
    indices: dict[str, Any] = {name: {} for name in handlers.INDICES}
    for kind in CHILD_KINDS:
        indices[handlers.child_index(kind)] = {key: [pack({"kind": kind.kind})]}
    view = handlers.IndexView(indices)
    assert [view.child(kind.kind, key) for kind in CHILD_KINDS] == [{"kind": k.kind} for k in CHILD_KINDS]


@pytest.mark.parametrize("kind", CHILD_KINDS, ids=_ids(CHILD_KINDS))
def test_each_kind_is_written_through_the_api_path_of_its_group_version_and_plural(kind: ChildKind) -> None:
    manifest = {"kind": kind.kind, "metadata": {"name": "pair", "namespace": "ns"}}
    verbs = ("patch", "delete") if kind.engine else ("patch",)
    for verb in verbs:
        call = KubeClient().route(verb, manifest)
        if kind.crd:
            assert (call.args, call.keywords) == ((kind.group, kind.version), {"plural": kind.plural})
            continue
        # The typed client builds each call's request in a ``_<method>_serialize`` of its own.
        source = inspect.getsource(getattr(type(call.__self__), f"_{call.__name__}_serialize"))
        prefix = f"/apis/{kind.group}/{kind.version}" if kind.group else f"/api/{kind.version}"
        assert f"'{prefix}/namespaces/{{namespace}}/{kind.plural}/{{name}}'" in source


def test_the_install_grants_each_kind_its_verbs() -> None:
    """manifests/install.yaml is the chart's render (tests/packaging keeps it current)."""
    documents = [d for d in yaml.safe_load_all(INSTALL_YAML.read_text()) if d]
    (role,) = [d for d in documents if d["kind"] == "ClusterRole"]
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    for kind in CHILD_KINDS:
        missing = {(kind.group, kind.plural, verb) for verb in kind.verbs} - granted
        assert not missing, f"{kind.kind}: the ClusterRole lacks {sorted(missing)}"

"""Hypothesis strategies for the fuzz suites, derived from the checked-in CRD and real fixtures.

Specs come from the CRD's own OpenAPI schema (what the apiserver validates), closed the way the
apiserver prunes unknown fields, so a generated spec is one the schema could store; the invalid
ones are those same specs with one value somewhere replaced by any JSON value. Model configs are
the pairing fixtures with fields overwritten, ConfigMap and Secret contents and node labels are
arbitrary text and bytes around the keys the operator reads. Shared by the unit fuzz (the
pipeline alone) and the cluster fuzz (the real apiserver and operator).
"""

from __future__ import annotations

import copy
import json
from functools import cache
from typing import Any

import yaml
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema

from support.paths import CRD_FILE, REPO, SEED_EXAMPLE

PAIRING_FIXTURES = REPO / "tests" / "unit" / "fixtures" / "pairing"
CONFIG_KEYS = ("verifier.json", "speculator.json")
NODE_LABELS = (
    "nvidia.com/gpu.product",
    "nvidia.com/gpu.memory",
    "nvidia.com/gpu.count",
    "nvidia.com/gpu.present",
)


def _closed(node: Any) -> Any:
    """The schema with unknown properties refused, as the apiserver's pruning drops them, and
    int-or-string fields typed as the apiserver types them."""
    if isinstance(node, list):
        return [_closed(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _closed(value) for key, value in node.items() if not key.startswith("x-kubernetes-")}
    if node.get("x-kubernetes-int-or-string"):
        out["type"] = ["integer", "string"]
    if "properties" in node and "additionalProperties" not in node:
        out["additionalProperties"] = False
    return out


@cache
def spec_schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD_FILE.read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return schema


def _scrub(value: Any) -> Any:
    """Strings as valid UTF-8 (JSON on the wire cannot carry lone surrogates)."""
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, list):
        return [_scrub(item) for item in value]
    if isinstance(value, dict):
        return {_scrub(key): _scrub(item) for key, item in value.items()}
    return value


def example_spec() -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load(SEED_EXAMPLE.read_text())["spec"]
    return spec


_scalars = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=20)
json_values = st.recursive(
    _scalars | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


def schema_specs() -> st.SearchStrategy[dict[str, Any]]:
    """Specs the CRD's schema admits (its CEL rules are not modelled: the apiserver applies them)."""
    return from_schema(_closed(spec_schema())).map(_scrub)


def example_variants() -> st.SearchStrategy[dict[str, Any]]:
    """The example with some of its top-level sections replaced by schema-generated ones: closer
    to what users write, so the pairing check and planner are reached, not only parsing."""

    def merge(generated: dict[str, Any], keep: frozenset[str]) -> dict[str, Any]:
        spec = example_spec()
        for key, value in generated.items():
            if key not in keep:
                spec[key] = value
        return spec

    keys = frozenset(spec_schema()["properties"])
    return st.builds(merge, schema_specs(), st.frozensets(st.sampled_from(sorted(keys))))


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*prefix, index))
    return found


@st.composite
def broken(draw: st.DrawFn, specs: st.SearchStrategy[dict[str, Any]]) -> dict[str, Any]:
    """A spec with one value, anywhere in it, replaced by an arbitrary JSON value (or removed)."""
    spec = copy.deepcopy(draw(specs))
    paths = _paths(spec)
    if not paths:
        return {"verifier": draw(json_values)}
    path = draw(st.sampled_from(paths))
    parent = spec
    for step in path[:-1]:
        parent = parent[step]
    if isinstance(parent, dict) and draw(st.booleans()):
        del parent[path[-1]]
    else:
        parent[path[-1]] = draw(json_values)
    return spec


def any_spec() -> st.SearchStrategy[dict[str, Any]]:
    """Valid-by-schema and broken specs, about half each."""
    valid = schema_specs() | example_variants()
    return valid | broken(valid)


def fixture_configs() -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in sorted(PAIRING_FIXTURES.glob("*.json"))]


@st.composite
def mutated_config(draw: st.DrawFn) -> dict[str, Any]:
    """A real config.json with some of its fields (or none) overwritten by arbitrary values."""
    config = copy.deepcopy(draw(st.sampled_from(fixture_configs())))
    for key in draw(st.lists(st.sampled_from(sorted(config)), max_size=4, unique=True)):
        config[key] = draw(json_values)
    return config


def config_texts() -> st.SearchStrategy[str]:
    """What a ConfigMap's verifier.json / speculator.json might hold: a config, JSON of another
    shape, or text that is not JSON at all."""
    return (
        mutated_config().map(json.dumps)
        | json_values.map(json.dumps)
        | st.text(max_size=40)
        | mutated_config().map(lambda c: json.dumps(c)[:-3])
    )


def configmap_data() -> st.SearchStrategy[dict[str, str]]:
    keys = st.sampled_from((*CONFIG_KEYS, "config.json"))
    return st.dictionaries(keys, config_texts().map(_scrub), max_size=3)


def secret_values() -> st.SearchStrategy[bytes]:
    """A token as a Secret may hold it: text with stray whitespace, control bytes, not UTF-8."""
    printable = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=30)
    return printable.map(str.encode) | printable.map(lambda t: f"{t}\n".encode()) | st.binary(max_size=30)


def node_labels() -> st.SearchStrategy[dict[str, str]]:
    """GPU feature discovery labels with any value Kubernetes would accept in a label."""
    value = st.from_regex(r"\A([A-Za-z0-9]([A-Za-z0-9._-]{0,20}[A-Za-z0-9])?)?\Z")
    return st.dictionaries(
        st.sampled_from(NODE_LABELS), value | st.sampled_from(["0", "-1", "80", "8", "H100"])
    )

"""Per-cluster values: which plain scalars the loader marks, every ``${...}`` form and
its defaults, typed placeholders, built-ins from v1beta1 and v1beta2 Clusters,
clusterField paths, topology variables, overrides, the messages of unresolved and
malformed references, size limits, the values digest, and properties: no value can
change the structure of the objects, values are never substituted again, and text
without references comes back equal."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from crs_controller.app.commands.convert import yaml_stream
from crs_controller.core.api.models import SourceRef
from crs_controller.core.errors import CRSError, InvalidManifest
from crs_controller.core.manifests.documents import load_documents, parse_objects
from crs_controller.core.manifests.hashing import object_hash
from crs_controller.core.manifests.limits import MAX_NODES
from crs_controller.core.render import substitute_resource
from crs_controller.core.values import substitution
from crs_controller.core.values.substitution import (
    MAX_STRUCTURED_NODES,
    MAX_TOTAL_CHARS,
    MAX_VALUE_CHARS,
    PATH_PATTERN,
    Placeholder,
    RefusedValue,
    TopologyString,
    UnresolvedVariable,
    VariableSpec,
    cluster_values,
    field_path_problem,
    readable_part,
    substitute,
    values_digest,
    where_looked,
)

RESOURCE = "ConfigMap fleet/addon"


def configmap(text: str) -> dict[str, Any]:
    """A resource-set ConfigMap holding ``text`` under one key."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "addon"},
        "data": {"k": text},
    }


def target(data: dict[str, Any]) -> dict[str, Any]:
    """An object of a resource, holding ``data``."""
    meta = {"name": "cfg", "namespace": "kube-system"}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def one(value: Any, values: dict[str, Any], **kwargs: Any) -> Any:
    """``value`` substituted as ``data.v`` of one object."""
    objects, _used = substitute([target({"v": value})], values, resource=RESOURCE, **kwargs)
    return objects[0]["data"]["v"]


def parsed_data(yaml_data: str) -> dict[str, Any]:
    manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\ndata:\n" + yaml_data
    data: dict[str, Any] = parse_objects(configmap(manifest))[0]["data"]
    return data


# --- what the loader marks ------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "marked"),
    [
        ("v: ${MTU}", True),
        ("v: ${MTU:-1450}", True),
        ("v: ${MTU:=1450}", True),
        ("v: ${A:- two words}", True),
        ("v: ${MTU}   # a comment", True),
        ("v: '${MTU}'", False),
        ('v: "${MTU}"', False),
        ("v: !!str ${MTU}", False),  # explicitly a string
        ("v: x${MTU}", False),
        ("v: ${MTU}x", False),
        ("v: ${A}${B}", False),
        ("v: $${MTU}", False),
        ("v: ${MTU", False),
        ("v: ${}", False),
        ("v: ${1A}", False),
        ("v: $MTU", False),
        ("v: |\n    ${MTU}", False),
        ("v: >-\n    ${MTU}", False),
        ("v: ${MTU}\n    continued", False),
    ],
)
def test_the_loader_marks_a_plain_scalar_that_is_one_reference(line: str, marked: bool) -> None:
    value = parsed_data("  " + line + "\n")["v"]
    assert isinstance(value, Placeholder) is marked
    assert isinstance(value, str)


def test_marks_in_lists_and_keys_and_nowhere_in_json() -> None:
    data = parsed_data("  ${KEY}: 1\n  list:\n  - ${ITEM}\n  - '${ITEM}'\n")
    assert [type(key) for key in data] == [Placeholder, str]
    assert [type(item) for item in data["list"]] == [Placeholder, str]
    as_json = json.dumps(target({"v": "${MTU}"}))
    assert type(parse_objects(configmap(as_json))[0]["data"]["v"]) is str


def test_a_placeholder_behaves_as_the_text_it_is() -> None:
    data = parsed_data("  v: ${MTU}\n")
    plain = {"v": "${MTU}"}
    assert data == plain
    assert hash(data["v"]) == hash("${MTU}")
    assert json.dumps(data) == json.dumps(plain)
    assert object_hash(data) == object_hash(plain)
    assert copy.deepcopy(data) == plain
    assert yaml.safe_dump(data) == yaml.safe_dump(plain)
    assert yaml_stream([data]) == yaml_stream([plain])  # convert's own dumper


def test_manifest_files_read_like_resources() -> None:
    # The CLI reads files with the same loader: a template passes through convert.
    document = load_documents("cluster.yaml", "metadata: {name: x}\nspec:\n  a: ${NAME}\n")[0]
    assert type(document["spec"]["a"]) is Placeholder
    assert yaml_stream([document]).endswith("a: ${NAME}\n")


# --- syntax ---------------------------------------------------------------------------

VALUES: dict[str, Any] = {"A": "x", "B": "y z", "EMPTY": "", "U": "ü"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("${A}", "x"),
        ("a${A}b", "axb"),
        ("${A}${B}", "xy z"),
        ("${A}-${A}", "x-x"),
        ("${U}${U}", "üü"),
        ("${EMPTY}", ""),
        ("<${EMPTY}>", "<>"),
        ("${A:-d}", "x"),
        ("${A:=d}", "x"),
        ("${UNSET:-d}", "d"),
        ("${UNSET:=d}", "d"),
        ("${EMPTY:-d}", "d"),
        ("${EMPTY:=d}", "d"),
        ("${UNSET:-}", ""),
        ("${UNSET:-a b: c, d}", "a b: c, d"),
        ("${UNSET:-$HOME}", "$HOME"),
        ("$${A}", "${A}"),
        ("$${A} ${A}", "${A} x"),
        ("$$${A}", "$${A}"),  # the leftmost "$${" is the escape
        ("$A $ $$ ${A}$", "$A $ $$ x$"),
        ("{${A}}", "{x}"),
        ("${A}}", "x}"),
        ("line\n${A}\n---\nkind: X", "line\nx\n---\nkind: X"),
    ],
)
def test_syntax(text: str, expected: str) -> None:
    assert one(text, VALUES) == expected


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("${", "not closed"),
        ("abc ${A", "not closed"),
        ("${}", "empty variable name"),
        ("${1A}", "a reference is ${NAME}"),
        ("${A B}", "a reference is ${NAME}"),
        ("${A-d}", "a reference is ${NAME}"),
        ("${A:d}", "a reference is ${NAME}"),
        ("${A:?d}", "a reference is ${NAME}"),
        ("${é}", "a reference is ${NAME}"),
        ("${A:-${B}}", "cannot hold another ${"),
        ("${A:-$${B}}", "cannot hold another ${"),
        ("${A} ${", "not closed"),
    ],
)
def test_a_malformed_reference_names_resource_path_and_text(text: str, problem: str) -> None:
    with pytest.raises(InvalidManifest) as info:
        one(text, VALUES)
    message = str(info.value)
    assert message.startswith(f"{RESOURCE}: ConfigMap kube-system/cfg, data.v: malformed")
    assert problem in message
    assert repr(text[text.rindex("${") if problem == "not closed" else 0 :]) in message


def test_a_malformed_reference_quotes_at_most_60_characters() -> None:
    text = "${" + "A" * 500 + " " + "z" * 500
    with pytest.raises(InvalidManifest) as info:
        one(text, VALUES)
    assert "A" * 58 in str(info.value)
    assert "A" * 59 not in str(info.value)
    assert "z" not in str(info.value)


@pytest.mark.parametrize(
    ("resource", "secret", "quoted"),
    [
        ("Secret fleet/creds", None, False),
        ("Secret/creds", None, False),
        ("Secrets fleet/x", None, True),
        (RESOURCE, None, True),
        (RESOURCE, True, False),
        ("Secret fleet/creds", False, True),
    ],
)
def test_a_secrets_text_is_never_quoted(resource: str, secret: bool | None, quoted: bool) -> None:
    with pytest.raises(InvalidManifest) as info:
        substitute(
            [target({"v": "${hunter2 is the password"})], VALUES, resource=resource, secret=secret
        )
    assert ("hunter2" in str(info.value)) is quoted
    assert "at character 1" in str(info.value)


@pytest.mark.parametrize(
    ("data", "path"),
    [
        ({"v": {"nested": ["ok", "${"]}}, "data.v.nested[1]"),
        ({"config.yaml": "${"}, "data['config.yaml']"),
    ],
)
def test_the_path_of_the_value_is_named(data: dict[str, Any], path: str) -> None:
    with pytest.raises(InvalidManifest, match=re.escape(f"cfg, {path}: malformed")):
        substitute([target(data)], VALUES, resource=RESOURCE)


def test_keys_are_never_substituted() -> None:
    data = parsed_data("  ${A}: ${A}\n  $${A}: '${A}'\n  nested:\n    ${A}: x${A}\n")
    objects, used = substitute([target(data)], VALUES, resource=RESOURCE)
    assert objects[0]["data"] == {"${A}": "x", "$${A}": "x", "nested": {"${A}": "xx"}}
    assert all(type(key) is str for key in objects[0]["data"])
    assert used == {"A"}


# --- typed placeholders ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1450", 1450),
        ("-3", -3),
        ("0x1F", 31),
        ("1_000", 1000),
        ("1.5", 1.5),
        ("true", True),
        ("False", False),
        ("yes", True),  # YAML 1.1, as kubectl and the manifests read it
        ("off", False),
        ("null", None),
        ("~", None),
        ("", None),
        ("abc", "abc"),
        ("10:30", "10:30"),  # base 60 is a string to go-yaml and to the loader
        ("2024-01-01", "2024-01-01"),
        (".nan", ".nan"),
        (".inf", ".inf"),
        ("0x_", "0x_"),
        ("1e3", 1000.0),  # go-yaml v2 needs no dot in a float, nor "yes" for true
        ("09", 9.0),
        ("0o17", 15),
        ("y", True),
        ("N", False),
        ("0x10000000000000000", "0x10000000000000000"),
        ("1450\n", "1450\n"),
        (" 1450", " 1450"),
        ("1450 # mtu", "1450 # mtu"),
        ("'1450'", "'1450'"),
        ("!!int 5", "!!int 5"),
        ("{a: 1}", "{a: 1}"),
        ("[1, 2]", "[1, 2]"),
        ("- x", "- x"),
        ("a: b", "a: b"),
        ("---\nkind: X", "---\nkind: X"),
        ("${OTHER}", "${OTHER}"),
    ],
)
def test_a_placeholder_takes_a_scalars_type(value: str, expected: Any) -> None:
    result = one(Placeholder("${V}"), {"V": value})
    assert result == expected
    assert type(result) is type(expected)
    assert one("${V}", {"V": value}) == value  # quoted: always the text
    assert one("<${V}>", {"V": value}) == f"<{value}>"


def test_a_placeholders_default_is_typed_too() -> None:
    assert one(Placeholder("${MTU:-1450}"), {}) == 1450
    assert one(Placeholder("${MTU:-1450}"), {"MTU": "9000"}) == 9000
    assert one(Placeholder("${ON:=true}"), {}) is True


def test_end_to_end_from_the_manifest() -> None:
    data = parsed_data(
        "  mtu: ${MTU}\n  quoted: '${MTU}'\n  text: mtu=${MTU}\n  enabled: ${ON:-false}\n"
    )
    objects, used = substitute([target(data)], {"MTU": "1450"}, resource=RESOURCE)
    assert objects[0]["data"] == {
        "mtu": 1450,
        "quoted": "1450",
        "text": "mtu=1450",
        "enabled": False,
    }
    assert used == {"MTU", "ON"}


# --- identity after substitution ------------------------------------------------------

TWO_OBJECTS = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: a-${CLUSTER_NAME}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: ${CLUSTER_NAME}
"""


def test_a_substituted_name_that_is_no_string_fails_the_resource_naming_the_field() -> None:
    objects = parse_objects(configmap(TWO_OBJECTS))
    values = cluster_values({"metadata": {"name": "0755", "namespace": "fleet"}}, [])
    ref = SourceRef(kind="ConfigMap", name="addon", substitute=True)
    with pytest.raises(InvalidManifest, match=r"metadata\.name must be a non-empty string") as e:
        substitute_resource(ref, objects, values, [])
    assert "493" not in str(e.value)
    renamed, _ = substitute_resource(ref, objects, {"CLUSTER_NAME": "web"}, [])
    assert [o["metadata"]["name"] for o in renamed] == ["a-web", "web"]


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("apiVersion", "1", "apiVersion must be a non-empty string"),
        ("kind", "true", "kind must be a non-empty string"),
        ("metadata.name", "null", "metadata.name must be a non-empty string"),
        ("metadata.name", "", "metadata.name must be a non-empty string"),
        ("metadata.namespace", "12", "metadata.namespace must be a string"),
    ],
)
def test_every_identity_field_is_checked_again(field: str, value: Any, problem: str) -> None:
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "n"}}
    parent, _, key = field.rpartition(".")
    (obj[parent] if parent else obj)[key] = Placeholder("${V}")
    with pytest.raises(InvalidManifest, match=re.escape(problem)) as raised:
        substitute([obj], {"V": value}, resource=RESOURCE)
    assert str(raised.value).startswith(f"{RESOURCE}: ")


# --- topology variables ---------------------------------------------------------------

JSON_VALUES = [
    (1450, "1450"),
    (1.5, "1.5"),
    (True, "true"),
    (False, "false"),
    (0, "0"),
    ("1450", "1450"),
    ("", ""),
    ([], "[]"),
    (["a", 1, None], '["a",1,null]'),
    ({"b": 1, "a": [True, {"c": "ü"}]}, '{"a":[true,{"c":"ü"}],"b":1}'),
]


def topology_cluster(value: Any) -> dict[str, Any]:
    variables = [{"name": "other", "value": 0}, {"name": "cniMTU", "value": value}]
    return {"spec": {"topology": {"version": "v1.34.4", "variables": variables}}}


@pytest.mark.parametrize(("value", "embedded"), JSON_VALUES)
def test_topology_variables_of_every_json_type(value: Any, embedded: str) -> None:
    cluster = topology_cluster(value)
    spec = VariableSpec("MTU", topology_variable="cniMTU", default="d")
    values = cluster_values(cluster, [spec])
    expected = "d" if value == "" else value  # an empty string takes the default
    typed = one(Placeholder("${MTU}"), values)
    assert typed == expected
    assert type(typed) is type(expected)
    assert one("mtu=${MTU}", values) == "mtu=" + ("d" if value == "" else embedded)
    if isinstance(typed, dict | list):
        typed.clear()  # a copy: the Cluster's value is untouched
        assert cluster == topology_cluster(value)


def test_a_topology_value_past_the_limits_is_refused_naming_the_variable() -> None:
    spec = VariableSpec("CFG", topology_variable="cniMTU", default="d")
    wide = cluster_values(topology_cluster([0] * MAX_STRUCTURED_NODES), [spec])["CFG"]
    deep = cluster_values(topology_cluster(json.loads("[" * 600 + "]" * 600)), [spec])["CFG"]
    assert wide == RefusedValue(
        f"topology variable cniMTU holds more than {MAX_STRUCTURED_NODES} nodes"
    )
    assert deep == RefusedValue("topology variable cniMTU is nested deeper than 256 levels")
    for refused in (wide, deep):
        for text in (Placeholder("${CFG}"), "${CFG:-x}", "<${CFG}>"):
            with pytest.raises(UnresolvedVariable, match="variable CFG cannot be used") as e:
                one(text, {"CFG": refused})
            assert "[0" not in str(e.value) and "[[" not in str(e.value)
    fits = [0] * (MAX_STRUCTURED_NODES - 1)
    assert cluster_values(topology_cluster(fits), [spec])["CFG"] == fits


def test_a_cluster_field_past_the_limits_is_refused_too() -> None:
    spec = VariableSpec("T", cluster_field="spec.topology")
    values = cluster_values(
        {"spec": {"topology": {"k": list(range(MAX_STRUCTURED_NODES))}}}, [spec]
    )
    assert values["T"] == RefusedValue(
        f"field spec.topology of the Cluster holds more than {MAX_STRUCTURED_NODES} nodes"
    )


def nested(levels: int) -> Any:
    return json.loads("[" * levels + "]" * levels)


def test_an_inserted_value_keeps_the_object_within_a_manifests_depth() -> None:
    # The object is a level, data another: data.v holds 254 more at most.
    assert one(Placeholder("${V}"), {"V": nested(254)}) == nested(254)
    with pytest.raises(InvalidManifest, match="value of V would nest it deeper than 256") as e:
        one(Placeholder("${V}"), {"V": nested(255)})
    assert str(e.value).startswith(f"{RESOURCE}: ConfigMap kube-system/cfg, data.v: ")


def test_inserted_values_together_stay_within_a_manifests_nodes() -> None:
    value = [0] * (MAX_STRUCTURED_NODES - 1)
    fits = {f"k{n}": Placeholder("${V}") for n in range(MAX_NODES // MAX_STRUCTURED_NODES)}
    objects, _ = substitute([target(fits)], {"V": value}, resource=RESOURCE)
    assert objects[0]["data"]["k0"] == value
    too_many = {**fits, "last": Placeholder("${V}")}
    with pytest.raises(InvalidManifest, match=f"would add more than {MAX_NODES} nodes"):
        substitute([target(too_many)], {"V": value}, resource=RESOURCE)


def test_a_topology_null_or_missing_variable_is_unset() -> None:
    spec = VariableSpec("MTU", topology_variable="cniMTU")
    assert "MTU" not in cluster_values(topology_cluster(None), [spec])
    assert "MTU" not in cluster_values({"spec": {"topology": {"variables": "x"}}}, [spec])
    with_default = dataclasses.replace(spec, default="1500")
    assert cluster_values(topology_cluster(None), [with_default])["MTU"] == "1500"


def test_a_topology_string_is_put_in_as_is_but_text_is_typed() -> None:
    from_topology = cluster_values(
        topology_cluster("true"), [VariableSpec("V", topology_variable="cniMTU")]
    )
    assert type(from_topology["V"]) is TopologyString
    assert one(Placeholder("${V}"), from_topology) == "true"
    assert one(Placeholder("${V}"), {"V": "true"}) is True


# --- built-ins ------------------------------------------------------------------------

V1BETA1 = yaml.safe_load(
    """
apiVersion: cluster.x-k8s.io/v1beta1
kind: Cluster
metadata: {name: prod-1, namespace: fleet, labels: {cni: calico}}
spec:
  clusterNetwork:
    pods: {cidrBlocks: [192.168.0.0/16, "fd00::/48"]}
    services: {cidrBlocks: [10.128.0.0/12]}
    serviceDomain: cluster.local
  controlPlaneEndpoint: {host: 10.0.0.1, port: 6443}
  topology: {class: quick-start, version: v1.34.4, variables: [{name: cniMTU, value: 1450}]}
status: {controlPlaneReady: true}
"""
)
V1BETA2 = yaml.safe_load(
    """
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {name: prod-1, namespace: fleet, labels: {cni: calico}}
spec:
  clusterNetwork:
    pods: {cidrBlocks: [192.168.0.0/16, "fd00::/48"]}
    services: {cidrBlocks: [10.128.0.0/12]}
    serviceDomain: cluster.local
  controlPlaneEndpoint: {host: 10.0.0.1, port: 6443}
  topology:
    classRef: {name: quick-start}
    version: v1.34.4
    variables: [{name: cniMTU, value: 1450}]
status: {initialization: {controlPlaneInitialized: true}}
"""
)
CLUSTER_AND_ENDPOINT = {
    "CLUSTER_NAME",
    "CLUSTER_NAMESPACE",
    "CONTROL_PLANE_HOST",
    "CONTROL_PLANE_PORT",
}
BUILTINS = {
    "CLUSTER_NAME": "prod-1",
    "CLUSTER_NAMESPACE": "fleet",
    "POD_CIDR": "192.168.0.0/16",
    "POD_CIDRS": "192.168.0.0/16,fd00::/48",
    "SERVICE_CIDR": "10.128.0.0/12",
    "SERVICE_CIDRS": "10.128.0.0/12",
    "SERVICE_DOMAIN": "cluster.local",
    "CONTROL_PLANE_HOST": "10.0.0.1",
    "CONTROL_PLANE_PORT": "6443",
    "KUBERNETES_VERSION": "v1.34.4",
}


@pytest.mark.parametrize("cluster", [V1BETA1, V1BETA2], ids=["v1beta1", "v1beta2"])
def test_builtins(cluster: dict[str, Any]) -> None:
    assert cluster_values(cluster, []) == BUILTINS
    text = "${CLUSTER_NAME}.${CLUSTER_NAMESPACE} ${POD_CIDRS} "
    text += "${CONTROL_PLANE_HOST}:${CONTROL_PLANE_PORT}"
    assert one(text, cluster_values(cluster, [])) == (
        "prod-1.fleet 192.168.0.0/16,fd00::/48 10.0.0.1:6443"
    )
    assert one(Placeholder("${CONTROL_PLANE_PORT}"), cluster_values(cluster, [])) == 6443


POD_CIDRS = {"POD_CIDR", "POD_CIDRS"}
ENDPOINT = {"CONTROL_PLANE_HOST", "CONTROL_PLANE_PORT"}


@pytest.mark.parametrize(
    ("field", "value", "absent"),
    [
        ("clusterNetwork", None, set(BUILTINS) - CLUSTER_AND_ENDPOINT - {"KUBERNETES_VERSION"}),
        ("clusterNetwork.pods.cidrBlocks", "10.0.0.0/8", POD_CIDRS),
        ("clusterNetwork.pods.cidrBlocks", [], POD_CIDRS),
        ("clusterNetwork.pods.cidrBlocks", ["10.0.0.0/8", 1], POD_CIDRS),
        ("clusterNetwork.pods.cidrBlocks", ["10.0.0.0/8", ""], POD_CIDRS),
        ("clusterNetwork.pods", ["10.0.0.0/8"], POD_CIDRS),
        ("clusterNetwork.services.cidrBlocks", None, {"SERVICE_CIDR", "SERVICE_CIDRS"}),
        ("clusterNetwork.serviceDomain", 5, {"SERVICE_DOMAIN"}),
        ("controlPlaneEndpoint", {"host": "", "port": 0}, ENDPOINT),  # not known yet
        ("controlPlaneEndpoint", "10.0.0.1:6443", ENDPOINT),
        ("controlPlaneEndpoint.port", "6443", {"CONTROL_PLANE_PORT"}),
        ("controlPlaneEndpoint.port", True, {"CONTROL_PLANE_PORT"}),
        ("controlPlaneEndpoint.port", 6443.0, {"CONTROL_PLANE_PORT"}),
        ("controlPlaneEndpoint.port", 70000, {"CONTROL_PLANE_PORT"}),
        ("topology", None, {"KUBERNETES_VERSION"}),
        ("topology.version", ["v1.34.4"], {"KUBERNETES_VERSION"}),
    ],
)
def test_a_builtin_is_defined_only_where_the_cluster_has_the_field(
    field: str, value: Any, absent: set[str]
) -> None:
    cluster = copy.deepcopy(V1BETA2)
    *parents, last = field.split(".")
    node = cluster["spec"]
    for parent in parents:
        node = node[parent]
    node[last] = value
    assert set(BUILTINS) - set(cluster_values(cluster, [])) == absent


@pytest.mark.parametrize(
    "cluster", [{}, {"metadata": "x", "spec": []}, {"spec": {"clusterNetwork": 7}}]
)
def test_odd_clusters_define_nothing(cluster: dict[str, Any]) -> None:
    assert cluster_values(cluster, [VariableSpec("X", cluster_field="spec.a[0]")]) == {}


# --- variables and overrides ----------------------------------------------------------

REGION = "metadata.labels['topology.kubernetes.io/region']"


def labelled(**labels: str) -> dict[str, Any]:
    cluster = copy.deepcopy(V1BETA2)
    cluster["metadata"]["labels"] = labels
    return cluster


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (VariableSpec("R", cluster_field=REGION), "eu"),
        (VariableSpec("R", cluster_field=REGION, default="west"), "eu"),
        (VariableSpec("R", cluster_field="metadata.labels['missing']", default="west"), "west"),
        (VariableSpec("R", cluster_field="metadata.labels['empty']", default="west"), "west"),
        (VariableSpec("R", cluster_field="metadata.labels['empty']"), None),
        (VariableSpec("R", cluster_field="metadata.labels['empty']", default=""), ""),
        (VariableSpec("R", cluster_field="metadata.labels.tier"), "db"),
        (VariableSpec("R", cluster_field="metadata.name"), "prod-1"),
        (VariableSpec("R", cluster_field="spec.controlPlaneEndpoint.port"), "6443"),
        (VariableSpec("R", cluster_field="spec.clusterNetwork.pods.cidrBlocks[1]"), "fd00::/48"),
        (VariableSpec("R", cluster_field="spec.clusterNetwork.pods.cidrBlocks[2]"), None),
        (
            VariableSpec("R", cluster_field="spec.clusterNetwork.services"),
            '{"cidrBlocks":["10.128.0.0/12"]}',
        ),
        (VariableSpec("R", cluster_field="status.initialization.controlPlaneInitialized"), "true"),
        (
            VariableSpec("R", cluster_field="spec.clusterNetwork['pods'].cidrBlocks[0]"),
            "192.168.0.0/16",
        ),
        (VariableSpec("R", cluster_field="metadata.uid", default="d"), "d"),  # invalid: absent
        (VariableSpec("R", value="v3.29.1"), "v3.29.1"),
        (VariableSpec("R", value="", default="d"), "d"),
        (VariableSpec("R", value=""), None),
        (VariableSpec("R", default="d"), "d"),
        (VariableSpec("R"), None),
        (VariableSpec("R", value="v", cluster_field=REGION), "v"),  # value first
    ],
)
def test_variables(spec: VariableSpec, expected: str | None) -> None:
    cluster = labelled(**{"topology.kubernetes.io/region": "eu", "empty": "", "tier": "db"})
    values = cluster_values(cluster, [spec])
    assert values.get("R") == expected
    assert "R" in values or expected is None


def test_a_variable_entry_replaces_a_builtin() -> None:
    replaced = cluster_values(V1BETA2, [VariableSpec("POD_CIDR", value="10.0.0.0/8")])
    assert replaced["POD_CIDR"] == "10.0.0.0/8"
    assert replaced["POD_CIDRS"] == BUILTINS["POD_CIDRS"]
    emptied = cluster_values(V1BETA2, [VariableSpec("POD_CIDR", cluster_field="spec.none")])
    assert "POD_CIDR" not in emptied


def test_the_last_entry_of_a_name_wins() -> None:
    specs = [VariableSpec("A", value="1"), VariableSpec("A", value="2")]
    assert cluster_values({}, specs)["A"] == "2"


def test_overrides_win_over_everything() -> None:
    specs = [VariableSpec("R", cluster_field=REGION), VariableSpec("T", topology_variable="cniMTU")]
    overrides = {"R": "us", "T": "9000", "CLUSTER_NAME": "other", "NEW": "", "POD_CIDR": "x"}
    values = cluster_values(labelled(**{"topology.kubernetes.io/region": "eu"}), specs, overrides)
    assert {name: values[name] for name in overrides} == overrides
    assert one(Placeholder("${T}"), values) == 9000  # --set is text
    assert one("[${NEW:-d}]", values) == "[d]"


def test_a_topology_value_is_read_once_and_never_copied_into_the_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = topology_cluster({"a": [1]})
    measured: list[Any] = []
    measure = substitution.json_size
    monkeypatch.setattr(
        substitution, "json_size", lambda v, **kw: measured.append(v) or measure(v, **kw)
    )
    specs = [VariableSpec(f"V{n}", topology_variable="cniMTU") for n in range(50)]
    values = cluster_values(cluster, specs)
    held = cluster["spec"]["topology"]["variables"][1]["value"]
    assert all(values[f"V{n}"] is held for n in range(50))
    assert measured == [held]
    inserted = one(Placeholder("${V0}"), values)
    inserted["a"].append(2)  # what substitution puts in is a copy
    assert cluster == topology_cluster({"a": [1]})


# --- where a value was looked for, unresolved variables ------------------------------

SPECS = [
    VariableSpec("REGION", cluster_field=REGION),
    VariableSpec("OWNER", cluster_field="metadata.annotations['example.com/owner']"),
    VariableSpec("ZONE", cluster_field="spec.placement.zone"),
    VariableSpec("MTU", topology_variable="cniMTU"),
    VariableSpec("TAG", value=""),
    VariableSpec("NOTHING"),
    VariableSpec("POD_CIDR", cluster_field="metadata.labels.cidr"),
]


@pytest.mark.parametrize(
    ("name", "where"),
    [
        ("REGION", "label topology.kubernetes.io/region of the Cluster"),
        ("OWNER", "annotation example.com/owner of the Cluster"),
        ("ZONE", "field spec.placement.zone of the Cluster"),
        ("MTU", "topology variable cniMTU"),
        ("TAG", "its value in spec.variables is empty"),
        ("NOTHING", "spec.variables gives it no value"),
        ("POD_CIDR", "label cidr of the Cluster"),
        ("POD_CIDRS", "built-in: spec.clusterNetwork.pods.cidrBlocks"),
        ("CONTROL_PLANE_PORT", "built-in: spec.controlPlaneEndpoint.port"),
        ("KUBERNETES_VERSION", "built-in: spec.topology.version"),
        ("TYPO", "no such variable"),
    ],
)
def test_unresolved_names_the_variable_the_resource_and_where_it_looked(
    name: str, where: str
) -> None:
    assert where_looked(name, SPECS) == where
    values = cluster_values({}, SPECS)
    with pytest.raises(UnresolvedVariable) as info:
        substitute([target({"v": f"x ${{{name}}}"})], values, resource=RESOURCE, variables=SPECS)
    assert str(info.value) == (
        f"{RESOURCE}: variable {name} has no value ({where}); "
        "used by ConfigMap kube-system/cfg, data.v"
    )
    assert info.value.reason == "UnresolvedVariable"
    assert info.value.variable == name
    assert isinstance(info.value, CRSError)


def test_where_looked_quotes_at_most_100_characters() -> None:
    long = "k" * 500
    specs = [
        VariableSpec("A", cluster_field=f"metadata.labels['{long}']"),
        VariableSpec("B", topology_variable=long),
    ]
    for name in ("A", "B"):
        assert "k" * 101 not in where_looked(name, specs)


def test_a_default_or_an_empty_value_resolves() -> None:
    assert one("${TAG:-latest}", cluster_values({}, SPECS)) == "latest"
    assert one("${TAG}", {"TAG": ""}) == ""


# --- clusterField paths ---------------------------------------------------------------

VALID_PATHS = [
    "metadata.name",
    "metadata.namespace",
    "metadata.labels",
    "metadata.labels.env",
    "metadata.labels['topology.kubernetes.io/region']",
    "metadata.annotations['example.com/a b']",
    "metadata.annotations['it\\'s']",
    "metadata.annotations['back\\\\slash']",
    "metadata.labels['ü']",
    "spec",
    "spec.clusterNetwork.pods.cidrBlocks[0]",
    "spec.clusterNetwork.pods.cidrBlocks[10]",
    "spec.topology.variables[0].value.a_b",
    "spec['a']['b'][3]",
    "status.initialization.controlPlaneInitialized",
    "spec._x1",
]

INVALID_PATHS = [
    ("", "empty"),
    ("metadata", "must start with"),
    ("metadata.uid", "must start with"),
    ("metadata.ownerReferences[0]", "must start with"),
    ("metadata.namex", "must start with"),
    ("specs", "must start with"),
    (" spec", "must start with"),
    ("data.x", "must start with"),
    ("metadata.name.first", "has no fields"),
    ("metadata.namespace['x']", "has no fields"),
    ("spec.", "at character 5: a field name"),
    ("spec..a", "at character 5: a field name"),
    ("spec.1a", "at character 5: a field name"),
    ("spec.a-b", "at character 7: expected .field"),
    ("spec[01]", "at character 5: expected ['key'] or [N]"),
    ("spec[-1]", "at character 5: expected ['key'] or [N]"),
    ("spec[x]", "at character 5: expected ['key'] or [N]"),
    ('spec["a"]', "at character 5: expected ['key'] or [N]"),
    ("spec[]", "at character 5: expected ['key'] or [N]"),
    ("spec['']", "at character 5: empty key"),
    ("spec['a", "at character 5: ['key'] is not closed"),
    ("spec['a\\']", "at character 5: ['key'] is not closed"),
    ("spec['a']b", "at character 10: expected .field"),
    ("spec['a'", "at character 9: expected ]"),
    ("spec['a\\n']", "at character 8: only"),
    ("spec['a'']", "at character 9: expected ]"),
    ("spec\n", "must start with"),
    ("spec.a\n", "at character 7"),
    ("x" * 1025, "longer than 1024"),
]


@pytest.mark.parametrize("path", VALID_PATHS)
def test_valid_paths(path: str) -> None:
    assert field_path_problem(path) is None
    assert re.fullmatch(PATH_PATTERN, path)


@pytest.mark.parametrize(("path", "problem"), INVALID_PATHS)
def test_invalid_paths(path: str, problem: str) -> None:
    message = field_path_problem(path)
    assert message is not None
    assert problem in message
    assert not re.fullmatch(PATH_PATTERN, path)


def test_a_path_problem_quotes_at_most_100_characters() -> None:
    for path in ("q" * 1000, "spec." + "q" * 500 + "!", "spec['" + "q" * 900):
        message = field_path_problem(path) or ""
        assert "q" * 101 not in message


path_fragments = st.sampled_from(
    [
        "metadata",
        "spec",
        "status",
        ".",
        "name",
        "namespace",
        "labels",
        "annotations",
        "a",
        "_b1",
        "1",
        "[",
        "]",
        "'",
        "\\",
        "0",
        "7",
        "01",
        "['k']",
        "[0]",
        "x y",
        "é",
        "\n",
        "-",
    ]
)


@settings(max_examples=500)
@given(st.lists(path_fragments, max_size=8).map("".join))
def test_the_crd_pattern_accepts_exactly_the_valid_paths(path: str) -> None:
    assert (field_path_problem(path) is None) == bool(re.fullmatch(PATH_PATTERN, path))


def test_the_crd_pattern_has_no_python_only_syntax() -> None:
    # Kubernetes checks `pattern:` with Go's RE2: no lookaround, no backreferences.
    assert not re.search(r"\(\?[=!<]|\\[1-9]|\(\?P", PATH_PATTERN)


# --- size limits ----------------------------------------------------------------------


def test_a_value_cannot_grow_a_string_past_the_limit() -> None:
    big = "b" * MAX_VALUE_CHARS
    assert one("${BIG}", {"BIG": big}) == big
    with pytest.raises(InvalidManifest, match="longer than") as info:
        one("x${BIG}", {"BIG": big})
    assert "bbb" not in str(info.value)
    with pytest.raises(InvalidManifest, match="longer than"):
        one(Placeholder("${BIG}"), {"BIG": big + "b"})


def test_a_value_used_many_times_cannot_grow_the_output_past_the_limit() -> None:
    count = MAX_TOTAL_CHARS // (1 << 18) + 1
    data = {f"k{i}": "${BIG}" for i in range(count)}
    with pytest.raises(InvalidManifest, match=f"longer than {MAX_TOTAL_CHARS}"):
        substitute([target(data)], {"BIG": "b" * (1 << 18)}, resource=RESOURCE)
    json_value = {"list": ["b" * (1 << 18)]}
    with pytest.raises(InvalidManifest, match=f"longer than {MAX_TOTAL_CHARS}"):
        substitute(
            [target({k: Placeholder("${J}") for k in data})], {"J": json_value}, resource=RESOURCE
        )


# --- copies and the values digest -----------------------------------------------------


def test_substitute_returns_copies() -> None:
    objects = [target({"v": Placeholder("${A}"), "list": [{"x": "${A}"}], "n": 1})]
    before = copy.deepcopy(objects)
    result, _used = substitute(objects, VALUES, resource=RESOURCE)
    result[0]["data"]["list"][0]["x"] = "changed"
    result[0]["metadata"]["name"] = "changed"
    assert objects == before
    assert type(objects[0]["data"]["v"]) is Placeholder


def test_the_values_digest() -> None:
    values = {"A": "1", "B": "2", "T": TopologyString("1"), "J": 1}
    digest = values_digest(frozenset({"A", "B"}), values)
    assert digest.startswith("xxh3:")
    assert digest == values_digest(frozenset({"B", "A"}), dict(reversed(values.items())))
    assert digest == values_digest(frozenset({"A", "B"}), values | {"UNUSED": "x"})
    assert digest != values_digest(frozenset({"A", "B"}), values | {"B": "3"})
    assert digest != values_digest(frozenset({"A"}), values)
    # An unset name counts: defining it later changes what a default produced.
    assert values_digest(frozenset({"U"}), {}) != values_digest(frozenset({"U"}), {"U": ""})
    # Text and a topology string of the same text fill a typed placeholder differently.
    assert values_digest(frozenset({"A"}), {"A": "1"}) != values_digest(
        frozenset({"A"}), {"A": TopologyString("1")}
    )
    assert values_digest(frozenset({"T"}), values) != values_digest(frozenset({"T"}), {"T": 1})


def test_used_names_do_not_depend_on_the_values() -> None:
    objects = [target({"a": "${A:-x} ${B:=y}", "b": Placeholder("${C:-1}")})]
    _, used_unset = substitute(objects, {}, resource=RESOURCE)
    _, used_set = substitute(objects, {"A": "1", "B": "2", "C": "3"}, resource=RESOURCE)
    assert used_unset == used_set == {"A", "B", "C"}


# --- properties -----------------------------------------------------------------------

TEMPLATE = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: ${V}-cfg
  namespace: kube-system
  labels: {app: "${V}"}
data:
  typed: ${V}
  quoted: "${V}"
  embedded: <${V}>
  twice: ${V}${V}
  defaulted: ${MISSING:-x}
  escaped: $${V}
  ${V}: key
  list:
  - ${V}
  - nested: {deep: ["a${V}"]}
---
apiVersion: v1
kind: Secret
metadata: {name: s}
stringData:
  config: |
    mtu: ${V}
    ---
    kind: Other
"""

ADVERSARIAL = [
    "",
    "---\nkind: Secret\nmetadata: {name: x}",
    "x\n---\napiVersion: v1\nkind: Namespace",
    "kind: Namespace",
    "{a: 1}",
    "[1, 2]",
    "- x\n- y",
    "a: b\nc: d",
    "${OTHER}",
    "$${V}",
    "${",
    "}",
    "1450",
    "true",
    "null",
    "&a [*a]",
    "!!python/object:os.system",
    "'quoted'",
    '"',
    "\u2028\u0085\x00\t",
    "ünïcødé ☃ 𝄞",
]

values_text = st.one_of(
    st.text(), st.sampled_from(ADVERSARIAL), st.lists(st.sampled_from(ADVERSARIAL)).map("\n".join)
)


def shape(value: Any) -> Any:
    """Structure only: the same keys at every path, the same list lengths."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shape(item) for item in value]
    return None


@settings(max_examples=300, deadline=None)
@given(value=values_text)
def test_no_value_changes_the_structure(value: str) -> None:
    objects = parse_objects(configmap(TEMPLATE))
    result, used = substitute(objects, {"V": value, "OTHER": "o"}, resource=RESOURCE)
    assert len(result) == len(objects) == 2
    assert shape(result) == shape(objects)
    data = result[0]["data"]
    assert data["quoted"] == value
    assert data["embedded"] == f"<{value}>"
    assert data["twice"] == value + value
    assert data["escaped"] == "${V}"
    assert data["defaulted"] == "x"
    assert data["list"][1] == {"nested": {"deep": [f"a{value}"]}}
    assert result[0]["metadata"]["name"] == f"{value}-cfg"
    assert result[1]["stringData"]["config"] == f"mtu: {value}\n---\nkind: Other\n"
    for typed in (data["typed"], data["list"][0]):
        assert typed == value or _is_typed_scalar(value, typed)
    assert used == {"V", "MISSING"}


def _is_typed_scalar(value: str, typed: Any) -> bool:
    """``typed`` is what a plain scalar ``value`` written in place reads as."""
    if isinstance(typed, str) or "\n" in value:
        return False
    expected = load_documents("value", f"v: {value}")[0]["v"]
    return typed == expected and type(typed) is type(expected)


@settings(max_examples=200)
@given(value=values_text, other=st.text())
def test_values_are_never_substituted_again(value: str, other: str) -> None:
    referring = f"{value}${{OTHER}}{value}$${{OTHER}}"
    objects = [target({"a": "${V}", "b": Placeholder("${V}"), "c": "[${V}]"})]
    result, used = substitute(objects, {"V": referring, "OTHER": other}, resource=RESOURCE)
    assert result[0]["data"] == {"a": referring, "b": referring, "c": f"[{referring}]"}
    assert used == {"V"}


json_leaves = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
json_trees = st.recursive(
    json_leaves,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


def _has_reference(value: Any) -> bool:
    """Whether a string value (keys are never substituted) holds ``${``."""
    if isinstance(value, str):
        return "${" in value
    if isinstance(value, dict):
        return any(_has_reference(item) for item in value.values())
    if isinstance(value, list):
        return any(_has_reference(item) for item in value)
    return False


@settings(max_examples=150)
@given(st.lists(st.dictionaries(st.text(max_size=8), json_trees, max_size=5), max_size=4))
def test_objects_without_references_come_back_equal(objects: list[dict[str, Any]]) -> None:
    objects = [obj for obj in objects if not _has_reference(obj)]
    result, used = substitute(objects, VALUES, resource=RESOURCE)
    assert result == objects
    assert used == frozenset()
    assert all(copied is not original for copied, original in zip(result, objects, strict=True))


@settings(max_examples=300)
@given(json_trees)
def test_cluster_values_never_raise_on_odd_clusters(cluster: Any) -> None:
    specs = [VariableSpec("A", cluster_field="spec.a[0]"), VariableSpec("T", topology_variable="t")]
    wrapped = {
        "metadata": cluster,
        "spec": cluster if isinstance(cluster, dict) else {"a": cluster},
    }
    values = cluster_values(wrapped, specs)
    for name, value in values.items():
        assert name == "T" or isinstance(value, str)
    json.dumps(values)


# --- what of a Cluster is kept for its values ------------------------------------------

# Paths under every root a clusterField may start at, and beside them.
READ_PATHS = [
    "metadata.name",
    "metadata.namespace",
    "metadata.labels['region']",
    "metadata.annotations['note']",
    "spec.a",
    "spec.a[0]",
    "spec.clusterNetwork.pods.cidrBlocks[1]",
    "status.phase",
    "status.a['b']",
]
metadata_trees = st.fixed_dictionaries(
    {},
    optional={
        "name": json_trees,
        "namespace": json_trees,
        "labels": json_trees,
        "annotations": json_trees,
        "managedFields": json_trees,
        "ownerReferences": json_trees,
        "uid": json_trees,
    },
)
cluster_trees = st.fixed_dictionaries(
    {},
    optional={
        "apiVersion": json_trees,
        "metadata": metadata_trees | json_trees,
        "spec": json_trees,
        "status": json_trees,
        "extra": json_trees,
    },
)


@settings(max_examples=300)
@given(cluster_trees, st.sampled_from([V1BETA1, V1BETA2]))
def test_the_readable_part_of_a_cluster_defines_the_same_values(
    odd: dict[str, Any], base: dict[str, Any]
) -> None:
    specs = [VariableSpec(f"V{n}", cluster_field=path) for n, path in enumerate(READ_PATHS)]
    specs.append(VariableSpec("T", topology_variable="cniMTU"))
    for cluster in (odd, {**base, **odd}, base):
        kept = readable_part(cluster)
        assert cluster_values(kept, specs) == cluster_values(cluster, specs)
        assert readable_part(kept) == kept


def test_the_readable_part_leaves_out_what_no_variable_reads() -> None:
    cluster = copy.deepcopy(V1BETA2)
    cluster["metadata"].update(managedFields=[{"manager": "m"}], uid="u", finalizers=["f"])
    kept = readable_part(cluster)
    assert set(kept) == {"metadata", "spec", "status"} & set(cluster)
    assert set(kept["metadata"]) <= {"name", "namespace", "labels", "annotations"}
    assert kept["spec"] is cluster["spec"]

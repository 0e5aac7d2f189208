"""``crs-controller convert``: Cluster API ClusterResourceSets (v1beta1 and v1beta2, as
``kubectl get -o yaml`` prints them) become valid ``addons.crs.dev/v1alpha1`` ones
(metadata cleaned, selector and resources kept, strategy as mode); every other
document passes through unchanged and in order; unknown fields, the paused
annotation, repeated resources, empty v1beta1 resource lists and Cluster API's
bindings are named on stderr, never dropped silently; the CLI prints YAML or a JSON
List, exits 0 with warnings and 2 (nothing on stdout) on unreadable or
unconvertible input."""

from __future__ import annotations

import argparse
import copy
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from crs_controller.app.capi_convert import convert_documents
from crs_controller.app.commands.convert import register, yaml_stream
from crs_controller.core.errors import InvalidSpec
from crs_controller.core.manifests.documents import load_documents
from crs_controller.core.spec.objects import parse_crs

Obj = dict[str, Any]

CALICO_MANIFEST = """\
apiVersion: v1
kind: Namespace
metadata:
  name: calico-system
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: calico-node
  namespace: calico-system
"""

# As `kubectl get clusterresourcesets.addons.cluster.x-k8s.io -o yaml` prints them
# from a Cluster API that serves v1beta1.
V1BETA1_RECONCILE = """\
apiVersion: addons.cluster.x-k8s.io/v1beta1
kind: ClusterResourceSet
metadata:
  annotations:
    kubectl.kubernetes.io/last-applied-configuration: |
      {"apiVersion":"addons.cluster.x-k8s.io/v1beta1","kind":"ClusterResourceSet"}
    platform.example.com/owner: networking
  creationTimestamp: "2025-03-04T10:12:44Z"
  finalizers:
  - addons.cluster.x-k8s.io
  generation: 1
  labels:
    team: platform
  managedFields:
  - apiVersion: addons.cluster.x-k8s.io/v1beta1
    fieldsType: FieldsV1
    fieldsV1: {f:spec: {f:strategy: {}}}
    manager: kubectl-client-side-apply
    operation: Update
    time: "2025-03-04T10:12:44Z"
  name: calico
  namespace: fleet
  resourceVersion: "48213"
  uid: 6f1c2b0e-3d0a-4b8e-9a57-1f0d4c2e9b11
spec:
  clusterSelector:
    matchLabels:
      cni: calico
  resources:
  - kind: ConfigMap
    name: calico-crds
  - kind: Secret
    name: calico-credentials
  strategy: Reconcile
status:
  conditions:
  - lastTransitionTime: "2025-03-04T10:13:02Z"
    status: "True"
    type: ResourcesApplied
"""

V1BETA1_NO_STRATEGY = """\
apiVersion: addons.cluster.x-k8s.io/v1beta1
kind: ClusterResourceSet
metadata:
  name: csi
  namespace: fleet
spec:
  clusterSelector:
    matchLabels:
      storage: ebs
  resources:
  - kind: ConfigMap
    name: ebs-csi
"""

V1BETA2_APPLY_ONCE = """\
apiVersion: addons.cluster.x-k8s.io/v1beta2
kind: ClusterResourceSet
metadata:
  creationTimestamp: "2025-09-18T08:01:17Z"
  finalizers:
  - addons.cluster.x-k8s.io
  generation: 2
  name: policies
  namespace: tenants
  ownerReferences:
  - apiVersion: v1
    kind: ConfigMap
    name: fleet-root
    uid: 0c9d8e7f-1111-2222-3333-444455556666
  resourceVersion: "9921"
  uid: 2a4e8c1d-5b6f-4a3e-8d2c-7e9f0a1b2c3d
spec:
  clusterSelector:
    matchExpressions:
    - key: environment
      operator: In
      values:
      - prod
      - staging
    - key: policies.example.com/opt-out
      operator: DoesNotExist
    matchLabels:
      region: eu-west-1
  resources:
  - kind: ConfigMap
    name: network-policies
  - kind: Secret
    name: registry-pull-secret
  strategy: ApplyOnce
status:
  conditions:
  - lastTransitionTime: "2025-09-18T08:01:20Z"
    message: ""
    observedGeneration: 2
    reason: Applied
    status: "True"
    type: ResourcesApplied
  deprecated:
    v1beta1:
      conditions:
      - lastTransitionTime: "2025-09-18T08:01:20Z"
        status: "True"
        type: ResourcesApplied
  observedGeneration: 2
"""

V1BETA2_RECONCILE = """\
apiVersion: addons.cluster.x-k8s.io/v1beta2
kind: ClusterResourceSet
metadata:
  name: cni
  namespace: fleet
spec:
  clusterSelector:
    matchExpressions:
    - key: cni
      operator: NotIn
      values: [none]
  resources:
  - {kind: Secret, name: cilium-values}
  - {kind: ConfigMap, name: cilium}
  strategy: Reconcile
"""


# What V1BETA2_RECONCILE becomes.
CNI_SPEC: Obj = {
    "clusterSelector": {
        "matchExpressions": [{"key": "cni", "operator": "NotIn", "values": ["none"]}]
    },
    "resources": [
        {"kind": "Secret", "name": "cilium-values"},
        {"kind": "ConfigMap", "name": "cilium"},
    ],
    "mode": "Reconcile",
}


def capi(text: str, **changes: Any) -> Obj:
    obj: Obj = yaml.safe_load(text)
    for path, value in changes.items():
        *parents, last = path.split("__")
        target = obj
        for part in parents:
            target = target[part]
        if value is None:
            del target[last]
        else:
            target[last] = value
    return obj


def expected_crs(name: str, namespace: str, spec: Obj, **metadata: Any) -> Obj:
    return {
        "apiVersion": "addons.crs.dev/v1alpha1",
        "kind": "ClusterResourceSet",
        "metadata": {"name": name, "namespace": namespace, **metadata},
        "spec": spec,
    }


def configmap(name: str = "calico-crds", namespace: str = "fleet") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"calico.yaml": CALICO_MANIFEST},
    }


def resource_set_secret(name: str = "calico-credentials") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "addons.cluster.x-k8s.io/resource-set",
        "metadata": {"name": name, "namespace": "fleet"},
        "data": {"token.yaml": "a2luZDogU2VjcmV0Cg=="},
    }


def binding() -> Obj:
    return {
        "apiVersion": "addons.cluster.x-k8s.io/v1beta2",
        "kind": "ClusterResourceSetBinding",
        "metadata": {"name": "prod-1", "namespace": "fleet"},
        "spec": {
            "clusterName": "prod-1",
            "bindings": [
                {
                    "clusterResourceSetName": "calico",
                    "resources": [
                        {
                            "kind": "ConfigMap",
                            "name": "calico-crds",
                            "applied": True,
                            "hash": "sha256:4b1c",
                            "lastAppliedTime": "2025-03-04T10:13:02Z",
                        }
                    ],
                }
            ],
        },
    }


def convert_one(obj: Obj) -> tuple[Obj, list[str]]:
    converted, warnings = convert_documents([obj])
    assert len(converted) == 1
    return converted[0], warnings


# --- conversion ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        pytest.param(
            capi(V1BETA1_RECONCILE),
            expected_crs(
                "calico",
                "fleet",
                {
                    "clusterSelector": {"matchLabels": {"cni": "calico"}},
                    "resources": [
                        {"kind": "ConfigMap", "name": "calico-crds"},
                        {"kind": "Secret", "name": "calico-credentials"},
                    ],
                    "mode": "Reconcile",
                },
                labels={"team": "platform"},
                annotations={"platform.example.com/owner": "networking"},
            ),
            id="v1beta1 Reconcile",
        ),
        pytest.param(
            capi(V1BETA1_NO_STRATEGY),
            expected_crs(
                "csi",
                "fleet",
                {
                    "clusterSelector": {"matchLabels": {"storage": "ebs"}},
                    "resources": [{"kind": "ConfigMap", "name": "ebs-csi"}],
                    "mode": "ApplyOnce",
                },
            ),
            id="v1beta1 no strategy is ApplyOnce",
        ),
        pytest.param(
            capi(V1BETA1_NO_STRATEGY, spec__strategy=""),
            expected_crs(
                "csi",
                "fleet",
                {
                    "clusterSelector": {"matchLabels": {"storage": "ebs"}},
                    "resources": [{"kind": "ConfigMap", "name": "ebs-csi"}],
                    "mode": "ApplyOnce",
                },
            ),
            id="v1beta1 empty strategy is ApplyOnce",
        ),
        pytest.param(
            capi(V1BETA2_APPLY_ONCE),
            expected_crs(
                "policies",
                "tenants",
                {
                    "clusterSelector": {
                        "matchExpressions": [
                            {"key": "environment", "operator": "In", "values": ["prod", "staging"]},
                            {"key": "policies.example.com/opt-out", "operator": "DoesNotExist"},
                        ],
                        "matchLabels": {"region": "eu-west-1"},
                    },
                    "resources": [
                        {"kind": "ConfigMap", "name": "network-policies"},
                        {"kind": "Secret", "name": "registry-pull-secret"},
                    ],
                    "mode": "ApplyOnce",
                },
            ),
            id="v1beta2 ApplyOnce with matchExpressions",
        ),
        pytest.param(
            capi(V1BETA2_RECONCILE),
            expected_crs(
                "cni",
                "fleet",
                CNI_SPEC,
            ),
            id="v1beta2 Reconcile, Secret first",
        ),
        pytest.param(
            capi(V1BETA2_RECONCILE, metadata__namespace=None),
            {
                "apiVersion": "addons.crs.dev/v1alpha1",
                "kind": "ClusterResourceSet",
                "metadata": {"name": "cni"},
                "spec": CNI_SPEC,
            },
            id="no namespace stays without one",
        ),
    ],
)
def test_capi_crs_becomes_a_valid_crs_here(source: Obj, expected: Obj) -> None:
    original = copy.deepcopy(source)
    converted, warnings = convert_one(source)
    assert converted == expected
    assert warnings == []
    assert source == original  # the input is not touched
    model = parse_crs(converted)
    assert model.problem is None
    assert model.valid.spec.mode == expected["spec"]["mode"]


def test_server_and_old_object_metadata_is_left_out_silently() -> None:
    converted, warnings = convert_one(capi(V1BETA2_APPLY_ONCE))
    assert converted["metadata"] == {"name": "policies", "namespace": "tenants"}
    assert "status" not in converted
    assert warnings == []
    # kubectl's record of the old object goes; the user's annotations stay.
    converted, _ = convert_one(capi(V1BETA1_RECONCILE))
    assert converted["metadata"]["annotations"] == {"platform.example.com/owner": "networking"}


def test_converted_objects_do_not_share_state_with_the_input() -> None:
    source = capi(V1BETA2_APPLY_ONCE)
    converted, _ = convert_one(source)
    converted["spec"]["clusterSelector"]["matchLabels"]["region"] = "changed"
    converted["spec"]["resources"][0]["name"] = "changed"
    assert source == capi(V1BETA2_APPLY_ONCE)


def test_other_documents_pass_through_unchanged_and_in_order() -> None:
    ours = expected_crs(
        "already",
        "fleet",
        {
            "clusterSelector": {"matchLabels": {"a": "b"}},
            "resources": [{"kind": "ConfigMap", "name": "x"}],
            "mode": "Reconcile",
            "driftDetection": "Content",
        },
    )
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "fleet"}}
    cluster = {
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Cluster",
        "metadata": {"name": "prod-1", "namespace": "fleet", "labels": {"cni": "calico"}},
        "spec": {"paused": False},
    }
    docs = [
        namespace,
        configmap(),
        capi(V1BETA1_RECONCILE),
        resource_set_secret(),
        ours,
        cluster,
    ]
    originals = copy.deepcopy(docs)
    converted, warnings = convert_documents(docs)
    assert [d["kind"] for d in converted] == [
        "Namespace",
        "ConfigMap",
        "ClusterResourceSet",
        "Secret",
        "ClusterResourceSet",
        "Cluster",
    ]
    assert converted[2]["apiVersion"] == "addons.crs.dev/v1alpha1"
    passed = [converted[i] for i in (0, 1, 3, 4, 5)]
    assert passed == [originals[i] for i in (0, 1, 3, 4, 5)]
    assert warnings == []


def test_converting_twice_changes_nothing() -> None:
    once, _ = convert_documents([capi(V1BETA2_RECONCILE), configmap("cilium")])
    twice, warnings = convert_documents(copy.deepcopy(once))
    assert twice == once
    assert warnings == []


# --- warnings ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "warning"),
    [
        pytest.param(
            capi(V1BETA2_RECONCILE, spec__foo={"bar": 1}),
            "fleet/cni: spec.foo has no counterpart; left out",
            id="unknown spec field",
        ),
        pytest.param(
            capi(
                V1BETA2_RECONCILE,
                spec__resources=[{"kind": "ConfigMap", "name": "cilium", "optional": True}],
            ),
            "fleet/cni: spec.resources[0].optional has no counterpart; left out",
            id="unknown field of a resource",
        ),
        pytest.param(
            capi(
                V1BETA2_RECONCILE,
                spec__clusterSelector={
                    "matchLabels": {"cni": "cilium"},
                    "matchFields": {"x": "y"},
                },
            ),
            "fleet/cni: spec.clusterSelector.matchFields has no counterpart; left out",
            id="unknown selector field",
        ),
        pytest.param(
            capi(
                V1BETA2_RECONCILE,
                spec__clusterSelector={
                    "matchExpressions": [
                        {"key": "cni", "operator": "Exists", "weight": 3},
                    ]
                },
            ),
            "fleet/cni: spec.clusterSelector.matchExpressions[0].weight has no counterpart; "
            "left out",
            id="unknown expression field",
        ),
        pytest.param(
            capi(V1BETA2_RECONCILE, rollout={"waves": 3}),
            "fleet/cni: rollout has no counterpart; left out",
            id="unknown top-level field",
        ),
        pytest.param(
            capi(V1BETA2_RECONCILE, metadata__displayName="CNI"),
            "fleet/cni: metadata.displayName has no counterpart; left out",
            id="unknown metadata field",
        ),
        pytest.param(
            capi(V1BETA2_RECONCILE, metadata__annotations={"cluster.x-k8s.io/paused": ""}),
            "fleet/cni: annotation cluster.x-k8s.io/paused left out: it pauses Cluster API's "
            "ClusterResourceSet and would pause the converted one too",
            id="paused annotation",
        ),
        pytest.param(
            capi(
                V1BETA2_RECONCILE,
                spec__resources=[
                    {"kind": "ConfigMap", "name": "cilium"},
                    {"kind": "Secret", "name": "cilium"},
                    {"kind": "ConfigMap", "name": "cilium"},
                ],
            ),
            "fleet/cni: spec.resources[2] repeats ConfigMap/cilium; left out",
            id="repeated resource",
        ),
    ],
)
def test_what_has_no_counterpart_is_named_and_left_out(source: Obj, warning: str) -> None:
    converted, warnings = convert_one(source)
    assert warnings == [warning]
    assert parse_crs(converted).problem is None
    text = json.dumps(converted)
    for gone in ("foo", "optional", "matchFields", "weight", "rollout", "displayName", "paused"):
        assert gone not in text


def test_the_unknown_field_keeps_the_rest_of_the_spec() -> None:
    converted, _ = convert_one(capi(V1BETA2_RECONCILE, spec__foo="bar"))
    assert converted == convert_one(capi(V1BETA2_RECONCILE))[0]


def test_repeated_resource_keeps_the_first_and_the_order() -> None:
    resources = [
        {"kind": "ConfigMap", "name": "a"},
        {"kind": "Secret", "name": "b"},
        {"kind": "ConfigMap", "name": "a"},
        {"kind": "ConfigMap", "name": "c"},
    ]
    converted, _ = convert_one(capi(V1BETA2_RECONCILE, spec__resources=resources))
    assert converted["spec"]["resources"] == [resources[0], resources[1], resources[3]]


@pytest.mark.parametrize("resources", [[], None], ids=["empty", "missing"])
def test_v1beta1_crs_without_resources_is_left_out_with_a_warning(resources: Any) -> None:
    source = capi(V1BETA1_NO_STRATEGY, spec__resources=resources)
    converted, warnings = convert_documents([configmap(), source])
    assert converted == [configmap()]
    assert warnings == [
        "fleet/csi: spec.resources is empty and a ClusterResourceSet here needs at least "
        "one; the ClusterResourceSet is left out"
    ]


def test_capi_binding_is_left_out_with_a_warning() -> None:
    converted, warnings = convert_documents([capi(V1BETA2_RECONCILE), binding(), configmap()])
    assert [(d["apiVersion"], d["kind"]) for d in converted] == [
        ("addons.crs.dev/v1alpha1", "ClusterResourceSet"),
        ("v1", "ConfigMap"),
    ]
    assert warnings == [
        "fleet/prod-1: Cluster API's ClusterResourceSetBinding left out "
        "(crs-controller writes its own bindings)"
    ]


def test_a_capi_list_as_the_api_returns_it_is_converted_item_by_item() -> None:
    item = capi(V1BETA2_RECONCILE)
    del item["apiVersion"], item["kind"]  # typed list items may leave them out
    listed = {
        "apiVersion": "addons.cluster.x-k8s.io/v1beta2",
        "kind": "ClusterResourceSetList",
        "metadata": {"resourceVersion": "77"},
        "items": [item, capi(V1BETA2_APPLY_ONCE)],
    }
    bindings = {
        "apiVersion": "addons.cluster.x-k8s.io/v1beta2",
        "kind": "ClusterResourceSetBindingList",
        "items": [binding()],
    }
    converted, warnings = convert_documents([listed, bindings])
    assert [d["metadata"]["name"] for d in converted] == ["cni", "policies"]
    assert all(d["apiVersion"] == "addons.crs.dev/v1alpha1" for d in converted)
    assert len(warnings) == 1
    assert "ClusterResourceSetBinding left out" in warnings[0]


# --- what cannot be converted --------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "message"),
    [
        pytest.param(
            capi(V1BETA2_RECONCILE, apiVersion="addons.cluster.x-k8s.io/v1alpha4"),
            "fleet/cni: addons.cluster.x-k8s.io/v1alpha4 ClusterResourceSet: only v1beta1 "
            "and v1beta2 can be converted",
            id="unknown version",
        ),
        pytest.param(
            capi(V1BETA2_RECONCILE, spec__strategy="Sometimes"),
            "fleet/cni: spec.strategy 'Sometimes' is neither ApplyOnce nor Reconcile",
            id="unknown strategy",
        ),
        pytest.param(
            capi(V1BETA2_RECONCILE, spec__resources=[{"kind": "Deployment", "name": "x"}]),
            "fleet/cni: cannot be converted: invalid spec: spec.resources.0.kind: "
            "Input should be 'ConfigMap' or 'Secret'",
            id="resource kind",
        ),
        pytest.param(
            capi(V1BETA2_RECONCILE, spec__clusterSelector=None),
            "fleet/cni: cannot be converted: invalid spec: spec.clusterSelector: Field required",
            id="no selector",
        ),
        pytest.param(
            capi(V1BETA2_RECONCILE, spec="everything"),
            "fleet/cni: spec must be an object",
            id="spec not an object",
        ),
        pytest.param(
            capi(V1BETA2_RECONCILE, metadata__labels={"tier": 1}),
            "fleet/cni: cannot be converted: invalid metadata: labels.tier: "
            "Input should be a valid string",
            id="label not a string",
        ),
    ],
)
def test_what_cannot_be_converted_is_an_error(source: Obj, message: str) -> None:
    with pytest.raises(InvalidSpec) as caught:
        convert_documents([configmap(), source])
    assert str(caught.value) == message


# --- the command -------------------------------------------------------------------


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="crs-controller")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    args = parser.parse_args(argv)
    code = args.func(args)
    out, err = capsys.readouterr()
    return code, out, err


def write(path: Path, *docs: Obj) -> Path:
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False), encoding="utf-8")
    return path


def test_cli_prints_yaml_documents_ready_for_kubectl_apply(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write(tmp_path / "capi.yaml", configmap(), capi(V1BETA1_RECONCILE))
    code, out, err = cli(capsys, "convert", "-f", str(source))
    assert (code, err) == (0, "")
    docs = load_documents("out", out)
    assert docs == convert_documents([configmap(), capi(V1BETA1_RECONCILE)])[0]
    assert out.startswith("---\n")
    # The manifests inside the ConfigMap stay readable.
    assert "calico.yaml: |\n" in out
    assert parse_crs(docs[1]).problem is None


def test_cli_prints_a_json_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = write(tmp_path / "capi.yaml", capi(V1BETA2_APPLY_ONCE), resource_set_secret())
    code, out, _ = cli(capsys, "convert", "--filename", str(source), "-o", "json")
    assert code == 0
    listed = json.loads(out)
    assert (listed["apiVersion"], listed["kind"]) == ("v1", "List")
    assert [d["kind"] for d in listed["items"]] == ["ClusterResourceSet", "Secret"]
    assert listed["items"][1] == resource_set_secret()


def test_cli_reads_files_directories_and_stdin_in_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "addons"
    folder.mkdir()
    write(folder / "b-crs.yaml", capi(V1BETA2_RECONCILE))
    write(folder / "a-cm.yml", configmap("cilium"))
    (folder / "notes.txt").write_text("not a manifest", encoding="utf-8")
    single = write(tmp_path / "single.yaml", capi(V1BETA1_NO_STRATEGY))
    monkeypatch.setattr("sys.stdin", io.StringIO(yaml.safe_dump(resource_set_secret())))
    code, out, _ = cli(capsys, "convert", "-f", str(folder), "-f", str(single), "-f", "-")
    assert code == 0
    docs = load_documents("out", out)
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("ConfigMap", "cilium"),
        ("ClusterResourceSet", "cni"),
        ("ClusterResourceSet", "csi"),
        ("Secret", "calico-credentials"),
    ]


def test_cli_kubectl_list_output_is_flattened_and_converted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exported = {
        "apiVersion": "v1",
        "kind": "List",
        "metadata": {"resourceVersion": ""},
        "items": [capi(V1BETA2_RECONCILE), capi(V1BETA2_APPLY_ONCE)],
    }
    code, out, _ = cli(capsys, "convert", "-f", str(write(tmp_path / "l.yaml", exported)))
    assert code == 0
    docs = load_documents("out", out)
    assert [d["metadata"]["name"] for d in docs] == ["cni", "policies"]
    assert all(parse_crs(d).problem is None for d in docs)


def test_cli_warnings_go_to_stderr_and_keep_exit_status_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write(
        tmp_path / "capi.yaml",
        capi(V1BETA2_RECONCILE, spec__foo="bar"),
        binding(),
    )
    code, out, err = cli(capsys, "convert", "-f", str(source))
    assert code == 0
    assert err.splitlines() == [
        "crs-controller convert: warning: fleet/cni: spec.foo has no counterpart; left out",
        "crs-controller convert: warning: fleet/prod-1: Cluster API's "
        "ClusterResourceSetBinding left out (crs-controller writes its own bindings)",
    ]
    assert [d["kind"] for d in load_documents("out", out)] == ["ClusterResourceSet"]


def test_cli_missing_file_is_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.yaml"
    code, out, err = cli(capsys, "convert", "-f", str(missing))
    assert (code, out) == (2, "")
    assert err == f"crs-controller convert: {missing}: No such file or directory\n"


def test_cli_invalid_yaml_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: ClusterResourceSet\nspec: [unclosed\n", encoding="utf-8")
    code, out, err = cli(capsys, "convert", "-f", str(bad))
    assert (code, out) == (2, "")
    assert err.startswith("crs-controller convert: ")
    assert len(err.splitlines()) == 1


def test_cli_unconvertible_crs_prints_nothing_on_stdout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write(
        tmp_path / "capi.yaml",
        configmap(),
        capi(V1BETA2_RECONCILE, spec__strategy="Sometimes"),
    )
    code, out, err = cli(capsys, "convert", "-f", str(source))
    assert (code, out) == (2, "")
    assert err == (
        "crs-controller convert: fleet/cni: spec.strategy 'Sometimes' is neither "
        "ApplyOnce nor Reconcile\n"
    )


def test_cli_help_shows_examples(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli(capsys, "convert", "--help")
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert "crs-controller convert -f - | kubectl apply -f -" in out
    assert "-f FILE, --filename FILE" in out
    assert "{yaml,json}" in out


@pytest.mark.parametrize("text", ["a\x85b", "line\u2028separator", "para\u2029graph", "x\ny\n"])
def test_the_output_reads_back_as_the_same_objects(text: str) -> None:
    """PyYAML writes YAML 1.1's extra line breaks as they are and reads them back as a
    space or a newline: such strings are double-quoted, where they are escaped."""
    documents = [{"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": text}}]
    assert list(yaml.safe_load_all(yaml_stream(documents))) == documents

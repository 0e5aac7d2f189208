"""``crs-controller render`` on config/samples and the shared add-ons: objects in the
controller's apply order, each resource's hash as the binding would record it,
--cluster-labels filtering, json/yaml for machines, and exit code 2 with one line
naming the resource for what cannot be rendered (never the Secret's content)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from crs_controller.app.cli import main
from crs_controller.app.commands.common import dump_manifest, dump_manifests
from crs_controller.core.manifests.documents import parse_objects
from crs_controller.core.manifests.hashing import resource_hash
from crs_controller.core.manifests.ordering import apply_order
from tests.addons import ADDONS, needs_addons

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "config" / "samples"


def render(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["render", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_samples_render_in_apply_order_with_the_controllers_hashes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = render(capsys, "-f", str(SAMPLES), "-o", "json")
    assert (code, err) == (0, "")
    (crs,) = json.loads(out)["clusterResourceSets"]
    assert (crs["namespace"], crs["name"]) == ("default", "demo")
    sources = {
        (d["kind"], d["metadata"]["name"]): d
        for f in sorted(SAMPLES.glob("demo-*.yaml"))
        for d in yaml.safe_load_all(f.read_text())
        if d
    }
    for resource in crs["resources"]:
        source = sources[(resource["kind"], resource["name"])]
        assert resource["hash"] == resource_hash(source)
        assert resource["objects"] == apply_order(parse_objects(source))


def test_the_table_lists_every_object(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = render(capsys, "-f", str(SAMPLES))
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["CRS", "REVISION", "RESOURCE", "HASH", "#", "KIND", "OBJECT"]
    assert any("demo-addon/demo-settings" in line for line in lines)


@pytest.mark.parametrize(("labels", "rendered"), [("crs-demo=true", 1), ("crs-demo=false", 0)])
def test_cluster_labels_pick_the_crss_that_select_them(
    capsys: pytest.CaptureFixture[str], labels: str, rendered: int
) -> None:
    code, out, _ = render(capsys, "-f", str(SAMPLES), "--cluster-labels", labels, "-o", "yaml")
    assert code == 0
    assert len(yaml.safe_load(out)["clusterResourceSets"]) == rendered


@needs_addons
@pytest.mark.parametrize("addon", ["calico", "kindnet"])
def test_the_shared_addons_render_from_stdin(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, addon: str
) -> None:
    text = (ADDONS / f"{addon}.yaml").read_text()
    source = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": addon, "namespace": "n"},
        "data": {"a": text},
    }
    crs = {
        "apiVersion": "addons.crs.dev/v1alpha1",
        "kind": "ClusterResourceSet",
        "metadata": {"name": addon, "namespace": "n"},
        "spec": {
            "clusterSelector": {"matchLabels": {"cni": addon}},
            "resources": [{"kind": "ConfigMap", "name": addon}],
        },
    }
    import io  # noqa: PLC0415

    monkeypatch.setattr("sys.stdin", io.StringIO(dump_manifests([crs, source])))
    code, out, _ = render(capsys, "-f", "-", "-o", "json")
    assert code == 0
    (resource,) = json.loads(out)["clusterResourceSets"][0]["resources"]
    assert resource["hash"] == resource_hash(source)
    kinds = [o["kind"] for o in resource["objects"]]
    assert kinds == [o["kind"] for o in apply_order(parse_objects(source))]


def test_what_cannot_be_rendered_is_named_with_exit_code_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "creds", "namespace": "n"},
        "type": "Opaque",
        "stringData": {"a": "token: s3cr3t-value"},
    }
    crs = {
        "apiVersion": "addons.crs.dev/v1alpha1",
        "kind": "ClusterResourceSet",
        "metadata": {"name": "x", "namespace": "n"},
        "spec": {
            "clusterSelector": {"matchLabels": {"a": "b"}},
            "resources": [
                {"kind": "Secret", "name": "creds"},
                {"kind": "ConfigMap", "name": "absent"},
            ],
        },
    }
    path = tmp_path / "in.yaml"
    path.write_text(dump_manifests([crs, secret]))
    code, _, err = render(capsys, "-f", str(path))
    assert code == 2
    assert "Secret creds" in err and "WrongSecretType" in err
    assert "ConfigMap absent" in err and "ResourceNotFound" in err
    assert "s3cr3t-value" not in err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("a: [", "invalid YAML at line 2"),
        ("a: &x [*x]", "in.yaml"),
        ("kind: ConfigMap\n", "no ClusterResourceSet"),
    ],
    ids=["broken", "recursive-alias", "no-crs"],
)
def test_bad_input_is_one_line_and_exit_code_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "in.yaml"
    path.write_text(content)
    code, out, err = render(capsys, "-f", str(path))
    assert code == 2 and out == ""
    assert message in err and err.count("\n") == 1, err


@pytest.mark.parametrize(
    ("kind", "field"),
    [("ClusterResourceSet", "namespace"), ("ConfigMap", "namespace"), ("ConfigMap", "name")],
)
def test_a_name_yaml_reads_as_no_string_is_exit_code_2_naming_the_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, kind: str, field: str
) -> None:
    """An unquoted ``n`` reads as false, as kubectl reads it (which then refuses it)."""
    crs = "apiVersion: addons.crs.dev/v1alpha1\nkind: ClusterResourceSet\n"
    crs += "metadata: {name: a, namespace: ns}\n"
    crs += "spec: {clusterSelector: {}, resources: [{kind: ConfigMap, name: cm}]}\n"
    source = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm, namespace: ns}\n"
    documents = {"ClusterResourceSet": crs, "ConfigMap": source}
    documents[kind] = documents[kind].replace(f"{field}: ", f"{field}: n, was: ", 1)
    path = tmp_path / "in.yaml"
    path.write_text(documents["ClusterResourceSet"] + "---\n" + documents["ConfigMap"])
    code, out, err = render(capsys, "-f", str(path))
    assert code == 2 and out == ""
    assert f"{kind}: metadata.{field} must be a string" in err and err.count("\n") == 1, err


def test_a_label_yaml_reads_as_a_boolean_is_exit_code_2_naming_the_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "in.yaml"
    path.write_text(
        "apiVersion: addons.crs.dev/v1alpha1\nkind: ClusterResourceSet\n"
        "metadata: {name: a, namespace: ns, labels: {team: y}}\n"
        "spec: {clusterSelector: {}, resources: [{kind: ConfigMap, name: cm}]}\n"
    )
    code, out, err = render(capsys, "-f", str(path))
    assert code == 2 and out == ""
    assert "ClusterResourceSet a: invalid metadata: labels.team" in err, err
    assert err.count("\n") == 1, err


def test_a_missing_file_is_exit_code_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = render(capsys, "-f", str(tmp_path / "nope.yaml"))
    assert code == 2 and "nope.yaml" in err


PER_CLUSTER = SAMPLES / "per-cluster-values"


def test_a_cluster_manifest_gives_the_values_and_set_overrides(
    capsys: pytest.CaptureFixture[str],
) -> None:
    calico, eu = str(PER_CLUSTER / "calico.yaml"), str(PER_CLUSTER / "clusters.yaml")
    code, out, _ = render(capsys, "-f", calico, "--cluster", eu, "-o", "json")
    assert code == 0
    (resource,) = json.loads(out)["clusterResourceSets"][0]["resources"]
    spec = resource["objects"][0]["spec"]
    assert spec["calicoNetwork"]["ipPools"][0]["cidr"] == "10.10.0.0/16"
    assert spec["calicoNetwork"]["mtu"] == 1400 and spec["registry"] == "registry.eu.example.com"
    assert "+xxh3:" in resource["hash"]  # the source's hash and the values it used
    code, out, _ = render(capsys, "-f", calico, "--cluster", eu, "--set", "MTU=9000", "-o", "json")
    (resource,) = json.loads(out)["clusterResourceSets"][0]["resources"]
    assert resource["objects"][0]["spec"]["calicoNetwork"]["mtu"] == 9000


def test_an_unresolved_variable_is_exit_code_2_naming_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    cluster = tmp_path / "bare.yaml"
    cluster.write_text(
        dump_manifest(
            {
                "apiVersion": "cluster.x-k8s.io/v1beta2",
                "kind": "Cluster",
                "metadata": {"name": "bare", "namespace": "default", "labels": {"cni": "calico"}},
            }
        )
    )
    code, _, err = render(capsys, "-f", str(PER_CLUSTER / "calico.yaml"), "--cluster", str(cluster))
    assert code == 2
    assert "POD_CIDR" in err and "UnresolvedVariable" in err


def test_control_characters_from_manifests_never_reach_the_terminal(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # A tenant-written name with an escape sequence (here: clear the screen).
    hostile = "x\x1b[2J"
    crs = {
        "apiVersion": "addons.crs.dev/v1alpha1",
        "kind": "ClusterResourceSet",
        "metadata": {"name": "x", "namespace": "n"},
        "spec": {
            "clusterSelector": {"matchLabels": {"a": "b"}},
            "resources": [{"kind": "ConfigMap", "name": hostile}],
        },
    }
    path = tmp_path / "in.yaml"
    path.write_text(dump_manifest(crs))
    code, out, err = render(capsys, "-f", str(path))
    assert code == 2
    assert "\x1b" not in out + err and "x\\x1b[2J" in err

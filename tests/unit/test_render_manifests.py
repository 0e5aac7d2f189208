"""``crs-controller render -o manifests`` and what render says instead of failing
silently: the stream is the controller's apply bodies in its apply order, each after
a ``# Source:`` comment naming the CRS, the resource, its hash and the CRS's
revision (computed as the status computes it); a selection that matches nothing,
a source given twice, a Cluster API CRS and every error are said, with nothing on
stdout on an error. Resources with kubernetesVersions: the version from
--kubernetes-version or the Cluster's control plane object, left out outside their
range or while the version is unknown (said on stderr), a bad version refused."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from crs_controller.app.cli import main
from crs_controller.app.commands.common import dump_manifest, dump_manifests
from crs_controller.app.commands.render import manifest_stream
from crs_controller.core.manifests.documents import (
    APPLIED_BY,
    APPLIED_BY_LABEL,
    apply_body,
    load_documents,
    parse_objects,
)
from crs_controller.core.manifests.hashing import resource_hash
from crs_controller.core.manifests.ordering import apply_order
from crs_controller.core.render import ClusterValues, render_crs
from crs_controller.core.rollout.plan import revision
from crs_controller.core.spec.objects import parse_crs
from crs_controller.core.versions.cluster_version import ClusterVersion
from crs_controller.core.versions.ranges import parse_version

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "config" / "samples"
CHAIN = SAMPLES / "dependency-chain" / "chain.yaml"
PER_CLUSTER = SAMPLES / "per-cluster-values"
SOURCE = re.compile(
    r"^# Source: ClusterResourceSet (?P<crs>\S+), (?P<kind>ConfigMap|Secret) (?P<name>\S+), "
    r"hash (?P<hash>\S+), revision (?P<revision>\S+)$"
)

Obj = dict[str, Any]


def render(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["render", *args])
    out, err = capsys.readouterr()
    return code, out, err


def sample_sources() -> dict[tuple[str, str], Obj]:
    return {
        (d["kind"], d["metadata"]["name"]): d
        for f in sorted(SAMPLES.glob("demo-*.yaml"))
        for d in yaml.safe_load_all(f.read_text())
        if d
    }


def comments(stream: str) -> list[re.Match[str]]:
    found = [SOURCE.match(line) for line in stream.splitlines() if line.startswith("#")]
    assert all(found), stream
    return [m for m in found if m is not None]


def crs(name: str, *resources: tuple[str, str], **spec: Any) -> Obj:
    return {
        "apiVersion": "addons.crs.dev/v1alpha1",
        "kind": "ClusterResourceSet",
        "metadata": {"name": name, "namespace": "n"},
        "spec": {
            "clusterSelector": {"matchLabels": {"a": "b"}},
            "resources": [{"kind": k, "name": n} for k, n in resources],
            **spec,
        },
    }


def configmap(name: str, *objects: Obj, namespace: str | None = "n") -> Obj:
    meta = {"name": name} | ({"namespace": namespace} if namespace else {})
    data = {"a": yaml.safe_dump_all(objects)} if objects else {}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def obj(name: str, kind: str = "ConfigMap") -> Obj:
    return {"apiVersion": "v1", "kind": kind, "metadata": {"name": name}}


def write(path: Path, *docs: Obj) -> str:
    # Quoted for go-yaml's rules, as a file kubectl reads must be: namespace "n" plain
    # would be false.
    path.write_text(dump_manifests(list(docs)))
    return str(path)


# --- the stream -----------------------------------------------------------------------


def test_the_stream_is_the_controllers_apply_bodies_in_apply_order(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = render(capsys, "-f", str(SAMPLES), "-o", "manifests")
    assert (code, err) == (0, "")
    sources = sample_sources()
    the_crs = next(
        d
        for d in yaml.safe_load_all(
            (SAMPLES / "addons_v1alpha1_clusterresourceset.yaml").read_text()
        )
        if d
    )
    refs = [(r["kind"], r["name"]) for r in the_crs["spec"]["resources"]]
    expected = [apply_body(o) for ref in refs for o in apply_order(parse_objects(sources[ref]))]
    assert list(yaml.safe_load_all(out)) == expected
    assert all(o["metadata"]["labels"][APPLIED_BY_LABEL] == APPLIED_BY for o in expected)
    # Each document: "---", its comment, then the object.
    assert out.count("---\n# Source: ") == len(expected) and out.startswith("---\n# Source: ")
    found = comments(out)
    assert [(m["kind"], m["name"]) for m in found] == [
        ref for ref in refs for _ in parse_objects(sources[ref])
    ]
    assert {m["crs"] for m in found} == {"default/demo"}
    assert all(m["hash"] == resource_hash(sources[(m["kind"], m["name"])]) for m in found)
    status_revision = revision([(k, n, resource_hash(sources[(k, n)])) for k, n in refs])
    assert {m["revision"] for m in found} == {status_revision}


def test_the_revision_is_in_every_output(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = render(capsys, "-f", str(SAMPLES), "-o", "manifests")
    shown = comments(out)[0]["revision"]
    _, out, _ = render(capsys, "-f", str(SAMPLES), "-o", "yaml")
    assert yaml.safe_load(out)["clusterResourceSets"][0]["revision"] == shown
    _, out, _ = render(capsys, "-f", str(SAMPLES))
    header, first, *rest = out.splitlines()
    assert header.split()[:3] == ["CRS", "REVISION", "RESOURCE"]
    # As status's table shows it (cut to 17 characters), on each CRS's first row.
    assert first.split()[1] == shown[:17] and all(shown[:17] not in line for line in rest)


def test_crss_come_in_dependency_order_whatever_the_input_order(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = [d for d in yaml.safe_load_all(CHAIN.read_text()) if d]
    monkeypatch.setattr("sys.stdin", io.StringIO(yaml.safe_dump_all(docs[::-1])))
    code, out, _ = render(capsys, "-f", "-", "-o", "manifests")
    assert code == 0
    crss = list(dict.fromkeys(m["crs"] for m in comments(out)))
    assert crss == ["default/cni", "default/csi", "default/apps"]


def test_values_are_substituted_and_the_hash_is_the_clusters(
    capsys: pytest.CaptureFixture[str],
) -> None:
    calico, eu = str(PER_CLUSTER / "calico.yaml"), str(PER_CLUSTER / "clusters.yaml")
    args = ("-f", calico, "--cluster", eu, "--set", "MTU=9000", "-o")
    code, out, _ = render(capsys, *args, "manifests")
    assert code == 0
    (installation,) = list(yaml.safe_load_all(out))
    assert installation["spec"]["calicoNetwork"]["mtu"] == 9000
    assert installation["spec"]["calicoNetwork"]["ipPools"][0]["cidr"] == "10.10.0.0/16"
    (comment,) = comments(out)
    _, report, _ = render(capsys, *args, "json")
    (resource,) = yaml.safe_load(report)["clusterResourceSets"][0]["resources"]
    assert comment["hash"] == resource["hash"] and "+xxh3:" in comment["hash"]


def test_a_name_with_a_newline_stays_in_its_comment(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    hostile = "x\napiVersion: v1\nkind: Secret"
    path = write(
        tmp_path / "in.yaml", crs("c", ("ConfigMap", hostile)), configmap(hostile, obj("o"))
    )
    code, out, _ = render(capsys, "-f", path, "-o", "manifests")
    assert code == 0
    assert [o["kind"] for o in yaml.safe_load_all(out)] == ["ConfigMap"]
    assert "ConfigMap x\\napiVersion: v1\\nkind: Secret" in out


LEAF = st.one_of(
    st.text(max_size=40),
    st.integers(-(2**53), 2**53),
    st.booleans(),
    st.none(),
    st.sampled_from(["yes", "no", "on", "1.0", "0x1F", "~", "null", "a: b", "- x", "|\n x"]),
)
VALUES = st.recursive(
    LEAF,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(data=st.dictionaries(st.text(min_size=1, max_size=12), VALUES, max_size=5))
def test_any_object_round_trips_through_the_stream(data: Obj) -> None:
    source = configmap("s", {**obj("o"), "spec": data})
    rendered = render_crs(parse_crs(crs("c", ("ConfigMap", "s"))), lambda k, n: source, None)
    stream = manifest_stream([rendered])
    assert list(yaml.safe_load_all(stream)) == rendered.resources[0].bodies()


def test_strings_kubectl_would_read_as_booleans_or_numbers_are_quoted() -> None:
    # kubectl reads YAML with go-yaml v2: plain y and N are booleans, 1e3 a number.
    source = {**obj("o"), "data": {"a": "y", "b": "N", "c": "1e3", "y": "0o17"}}
    text = dump_manifest(source)
    assert "\n  a: 'y'\n  b: 'N'\n  c: '1e3'\n  'y': '0o17'\n" in text
    assert load_documents("out", text) == [source]


@settings(max_examples=300, deadline=None)
@given(
    data=st.dictionaries(
        st.text(max_size=12) | st.sampled_from(["y", "N", "on", "1e3", "09", "0o17", "<<"]),
        st.text(max_size=12) | st.sampled_from(["y", "N", "1e3", "-1E-3", "0B11", ".5", "~"]),
        max_size=5,
    )
)
def test_any_string_reads_back_as_a_string_through_go_yamls_rules(data: dict[str, str]) -> None:
    # load_documents resolves plain scalars and keys as go-yaml v2 does.
    source = {**obj("o"), "data": data}
    assert load_documents("out", dump_manifest(source)) == [source]
    assert load_documents("out", dump_manifests([source, source])) == [source, source]


def test_render_crs_with_values_hashes_as_the_controller_records() -> None:
    source = configmap("s", {**obj("o"), "data": {"v": "v-${V}"}})
    spec = {"variables": [{"name": "V", "value": "1"}]}
    the_crs = crs("c", ("ConfigMap", "s"), **spec)
    the_crs["spec"]["resources"][0]["substitute"] = True
    rendered = render_crs(parse_crs(the_crs), lambda k, n: source, ClusterValues({}))
    (resource,) = rendered.resources
    assert resource.objects[0]["data"] == {"v": "v-1"}
    assert resource.hash.startswith(resource.source_hash + "+xxh3:")
    assert rendered.revision == revision([("ConfigMap", "s", resource_hash(source))])


# --- what render says instead of failing silently --------------------------------------


def test_labels_that_select_nothing_say_so_with_exit_code_0(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for output in ("table", "manifests"):
        code, out, err = render(capsys, "-f", str(SAMPLES), "--cluster-labels", "x=y", "-o", output)
        assert (code, out) == (0, "")
        assert err.startswith("No resources found") and "x=y" in err and err.count("\n") == 1
    code, out, err = render(capsys, "-f", str(SAMPLES), "--cluster-labels", "x=y", "-o", "json")
    assert (code, yaml.safe_load(out)) == (0, {"clusterResourceSets": []})
    assert "No resources found" in err


def test_a_cluster_that_nothing_selects_is_named(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    cluster = {
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Cluster",
        "metadata": {"name": "c", "labels": {"k": "v"}},
    }
    path = write(tmp_path / "cluster.yaml", cluster)
    code, out, err = render(capsys, "-f", str(SAMPLES), "--cluster", path)
    assert (code, out) == (0, "")
    assert "No resources found" in err and "cluster.yaml" in err and "k=v" in err


@pytest.mark.parametrize("order", ["crs-first", "crs-last"])
def test_a_source_given_twice_is_an_error_naming_both_files(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, order: str
) -> None:
    first = write(tmp_path / "one.yaml", crs("c", ("ConfigMap", "s")), configmap("s", obj("a")))
    second = write(tmp_path / "two.yaml", configmap("s", obj("b")))
    files = [first, second] if order == "crs-first" else [second, first]
    for output in ("table", "manifests"):
        code, out, err = render(capsys, "-f", files[0], "-f", files[1], "-o", output)
        assert (code, out) == (2, "")
        assert "ConfigMap s in namespace n is given twice" in err
        assert "one.yaml document 2" in err and "two.yaml document 1" in err
        assert err.count("\n") == 1


def test_a_crs_given_twice_is_an_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write(
        tmp_path / "in.yaml",
        crs("c", ("ConfigMap", "s")),
        configmap("s"),
        crs("c", ("ConfigMap", "s")),
    )
    code, out, err = render(capsys, "-f", path)
    assert (code, out) == (2, "")
    assert "ClusterResourceSet c in namespace n is given twice" in err


def capi(name: str) -> Obj:
    return {
        "apiVersion": "addons.cluster.x-k8s.io/v1beta2",
        "kind": "ClusterResourceSet",
        "metadata": {"name": name, "namespace": "n"},
        "spec": {"clusterSelector": {}, "resources": [{"kind": "ConfigMap", "name": "s"}]},
    }


def test_a_cluster_api_crs_gets_a_hint_to_convert(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write(tmp_path / "capi.yaml", capi("old"), configmap("s", obj("a")))
    code, out, err = render(capsys, "-f", path)
    assert (code, out) == (2, "")
    assert "no ClusterResourceSet (addons.crs.dev/v1alpha1)" in err
    assert "ClusterResourceSet old is Cluster API's (addons.cluster.x-k8s.io/v1beta2)" in err
    assert "crs-controller convert" in err and err.count("\n") == 1


def test_a_cluster_api_crs_beside_ours_is_a_warning(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write(
        tmp_path / "in.yaml", capi("old"), crs("c", ("ConfigMap", "s")), configmap("s", obj("a"))
    )
    code, out, err = render(capsys, "-f", path, "-o", "manifests")
    assert code == 0 and [o["metadata"]["name"] for o in yaml.safe_load_all(out)] == ["a"]
    assert err.startswith("crs-controller render: warning: ") and "convert" in err


@pytest.mark.parametrize("output", ["table", "json", "yaml", "manifests"])
def test_an_error_prints_nothing_on_stdout(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, output: str
) -> None:
    # One CRS renders, the other names a missing ConfigMap: no half of the output.
    path = write(
        tmp_path / "in.yaml",
        crs("good", ("ConfigMap", "s")),
        configmap("s", obj("a")),
        crs("bad", ("ConfigMap", "absent")),
    )
    code, out, err = render(capsys, "-f", path, "-o", output)
    assert (code, out) == (2, "")
    assert "n/bad: ConfigMap absent: not in the given manifests (ResourceNotFound)" in err


def test_manifests_never_carry_a_placeholder(capsys: pytest.CaptureFixture[str]) -> None:
    # Without --cluster the table shows the source as written; the stream is what
    # the controller sends, so a variable with no value is an error naming it.
    calico = str(PER_CLUSTER / "calico.yaml")
    code, out, err = render(capsys, "-f", calico, "-o", "manifests")
    assert (code, out) == (2, "")
    assert "POD_CIDR has no value" in err and "--cluster FILE or --set NAME=VALUE" in err
    code, out, _ = render(capsys, "-f", calico, "-o", "manifests", "--set", "POD_CIDR=10.0.0.0/8")
    assert code == 0 and "${" not in out
    (installation,) = list(yaml.safe_load_all(out))
    assert installation["spec"]["calicoNetwork"]["ipPools"][0]["cidr"] == "10.0.0.0/8"


# --- resources that follow the Kubernetes version --------------------------------------

RANGES = {"cpi-1-33": ">=1.33.0, <1.34.0", "cpi-1-34": ">=1.34.0, <1.35.0"}


def versioned_crs() -> Obj:
    the_crs = crs("cpi", ("ConfigMap", "config"), *(("ConfigMap", n) for n in RANGES))
    for resource in the_crs["spec"]["resources"][1:]:
        resource["kubernetesVersions"] = RANGES[resource["name"]]
    return the_crs


def versioned_inputs(tmp_path: Path, *extra: Obj) -> str:
    sources = [configmap(n, obj(f"{n}-object")) for n in ("config", *RANGES)]
    return write(tmp_path / "cpi.yaml", versioned_crs(), *sources, *extra)


def v1beta2_cluster(*, control_plane: str | None = "cp") -> Obj:
    spec = {}
    if control_plane is not None:
        spec["controlPlaneRef"] = {
            "apiGroup": "controlplane.cluster.x-k8s.io",
            "kind": "KubeadmControlPlane",
            "name": control_plane,
        }
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Cluster",
        "metadata": {"name": "prod", "namespace": "n", "labels": {"a": "b"}},
        "spec": spec,
    }


def control_plane(version: str | None, name: str = "cp") -> Obj:
    status = {"version": version} if version is not None else {}
    return {
        "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2",
        "kind": "KubeadmControlPlane",
        "metadata": {"name": name, "namespace": "n"},
        "spec": {"version": version or "v1.34.0"},
        "status": status,
    }


def streamed(out: str) -> list[str]:
    return [o["metadata"]["name"] for o in yaml.safe_load_all(out)]


@pytest.mark.parametrize(
    ("version", "objects"),
    [
        ("v1.33.5", ["config-object", "cpi-1-33-object"]),
        ("v1.34.2", ["config-object", "cpi-1-34-object"]),
        ("1.34.0+vmware.1", ["config-object", "cpi-1-34-object"]),  # build metadata ignored
        ("v1.35.0-rc.1", ["config-object", "cpi-1-34-object"]),  # before 1.35.0
        ("v1.32.9", ["config-object"]),
    ],
)
def test_the_kubernetes_version_picks_the_resources_of_its_range(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, version: str, objects: list[str]
) -> None:
    path = versioned_inputs(tmp_path)
    code, out, err = render(capsys, "-f", path, "--kubernetes-version", version, "-o", "manifests")
    assert code == 0
    # Only a version no resource is for has something to say (NoResourceForVersion).
    assert ("NoResourceForVersion" in err) == (objects == ["config-object"]), err
    assert streamed(out) == objects


@pytest.mark.parametrize(
    ("ranges", "said"),
    [
        (RANGES, True),  # 1.34's build, bounded <1.35.0, holds 1.35.0-rc.1
        ({"cpi-1-33": ">=1.33.0-0, <1.34.0-0", "cpi-1-34": ">=1.34.0-0, <1.35.0-0"}, False),
    ],
)
def test_a_pre_release_held_by_the_build_before_is_noted(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    ranges: dict[str, str],
    said: bool,
) -> None:
    monkeypatch.setitem(RANGES, "cpi-1-33", ranges["cpi-1-33"])
    monkeypatch.setitem(RANGES, "cpi-1-34", ranges["cpi-1-34"])
    path = versioned_inputs(tmp_path)
    for version in ("v1.35.0-rc.1", "v1.34.2"):
        code, _, err = render(capsys, "-f", path, "--kubernetes-version", version)
        noted = "v1.35.0-rc.1 is a pre-release inside the range of ConfigMap cpi-1-34, v1.35.0 is"
        assert code == 0 and (noted in err) == (said and version == "v1.35.0-rc.1"), err
        assert ("<1.35.0-0 leaves it out" in err) == (noted in err)


def test_a_resource_outside_the_range_is_absent_and_json_says_why(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = versioned_inputs(tmp_path)
    code, out, _ = render(capsys, "-f", path, "--kubernetes-version", "v1.34.2", "-o", "json")
    assert code == 0
    (report,) = yaml.safe_load(out)["clusterResourceSets"]
    assert [r["name"] for r in report["resources"]] == ["config", "cpi-1-34"]
    assert report["leftOut"] == [
        {
            "kind": "ConfigMap",
            "name": "cpi-1-33",
            "kubernetesVersions": RANGES["cpi-1-33"],
            "reason": "OutsideVersionRange",
        }
    ]
    # The revision is the CRS's, whatever the cluster runs.
    _, other, _ = render(capsys, "-f", path, "--kubernetes-version", "v1.33.0", "-o", "json")
    assert yaml.safe_load(other)["clusterResourceSets"][0]["revision"] == report["revision"]
    _, table, _ = render(capsys, "-f", path, "--kubernetes-version", "v1.34.2")
    assert "ConfigMap/cpi-1-34" in table and "cpi-1-33" not in table


@pytest.mark.parametrize("where", ["-f", "--cluster"])
def test_the_version_comes_from_the_clusters_control_plane_object(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, where: str
) -> None:
    path = versioned_inputs(tmp_path)
    if where == "-f":
        cluster = write(tmp_path / "cluster.yaml", v1beta2_cluster())
        args = ("-f", path, "-f", write(tmp_path / "cp.yaml", control_plane("v1.33.1")))
    else:  # beside the Cluster in its own file
        cluster = write(tmp_path / "cluster.yaml", v1beta2_cluster(), control_plane("v1.33.1"))
        args = ("-f", path)
    code, out, err = render(capsys, *args, "--cluster", cluster, "-o", "manifests")
    assert (code, err) == (0, "")
    assert streamed(out) == ["config-object", "cpi-1-33-object"]
    # The flag wins over what the control plane reports.
    flagged = (*args, "--cluster", cluster, "--kubernetes-version", "v1.34.0", "-o", "manifests")
    code, out, err = render(capsys, *flagged)
    assert (code, err) == (0, "")
    assert streamed(out) == ["config-object", "cpi-1-34-object"]


def test_a_file_given_as_f_and_as_cluster_is_read_once(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    both = versioned_inputs(tmp_path, v1beta2_cluster(), control_plane("v1.34.1"))
    code, out, _ = render(capsys, "-f", both, "--cluster", both, "-o", "manifests")
    assert code == 0 and streamed(out) == ["config-object", "cpi-1-34-object"]


@pytest.mark.parametrize(
    ("cluster", "extra", "why"),
    [
        (None, (), "neither --kubernetes-version nor --cluster is given"),
        (v1beta2_cluster(), (), "its KubeadmControlPlane cp is not in the given manifests"),
        (v1beta2_cluster(control_plane=None), (), "names no control plane"),
        (v1beta2_cluster(), (control_plane(None),), "reports no version (status.version)"),
        (v1beta2_cluster(), (control_plane("v1.34.1", name="other"),), "cp is not in the given"),
    ],
    ids=["nothing-given", "object-absent", "no-ref", "no-status-version", "another-object"],
)
def test_an_unknown_version_leaves_the_versioned_resources_out_saying_why(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    cluster: Obj | None,
    extra: tuple[Obj, ...],
    why: str,
) -> None:
    args = ["-f", versioned_inputs(tmp_path, *extra)]
    if cluster is not None:
        args += ["--cluster", write(tmp_path / "cluster.yaml", cluster)]
    for output in ("manifests", "table", "json"):
        code, out, err = render(capsys, *args, "-o", output)
        assert code == 0
        assert err.count("\n") == 1 and "(WaitingForVersion)" in err and why in err, err
        assert "ConfigMap/cpi-1-33, ConfigMap/cpi-1-34 follow the Kubernetes version" in err
        assert "--kubernetes-version VERSION" in err
        if output == "manifests":
            assert streamed(out) == ["config-object"]
        elif output == "json":
            (report,) = yaml.safe_load(out)["clusterResourceSets"]
            assert [r["name"] for r in report["resources"]] == ["config"]
            assert {r["reason"] for r in report["leftOut"]} == {"WaitingForVersion"}
        else:
            assert "cpi-1-3" not in out


@pytest.mark.parametrize("output", ["table", "manifests", "json"])
def test_a_version_no_resource_is_for_is_said_on_stderr(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, output: str
) -> None:
    path = versioned_inputs(tmp_path)
    code, out, err = render(capsys, "-f", path, "--kubernetes-version", "v1.36.0", "-o", output)
    assert code == 0
    assert err.count("\n") == 1 and "(NoResourceForVersion)" in err, err
    assert "Kubernetes v1.36.0" in err and "keeps what it has" in err
    assert "cpi-1-3" not in out or output == "json"
    # A version a resource is for says nothing.
    code, _, err = render(capsys, "-f", path, "--kubernetes-version", "v1.34.0", "-o", output)
    assert (code, err) == (0, "")


def test_without_versioned_resources_nothing_is_said_about_versions(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = render(capsys, "-f", str(SAMPLES), "-o", "json")
    assert (code, err) == (0, "")
    assert yaml.safe_load(out)["clusterResourceSets"][0]["leftOut"] == []


@pytest.mark.parametrize("bad", ["1.34", "latest", "v1.34.2.1", "", "v" + "1" * 200 + ".0.0"])
def test_a_bad_kubernetes_version_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, bad: str
) -> None:
    path = versioned_inputs(tmp_path)
    code, out, err = render(capsys, "-f", path, "--kubernetes-version", bad, "-o", "manifests")
    assert (code, out) == (2, "")
    assert err.startswith("crs-controller render: --kubernetes-version: ")
    assert "is not a Kubernetes version" in err and err.count("\n") == 1


def test_two_different_control_plane_objects_are_an_error_naming_both(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = versioned_inputs(tmp_path, control_plane("v1.33.0"))
    cluster = write(tmp_path / "cluster.yaml", v1beta2_cluster(), control_plane("v1.34.0"))
    code, out, err = render(capsys, "-f", path, "--cluster", cluster)
    assert (code, out) == (2, "")
    assert "KubeadmControlPlane cp is given twice" in err and "cluster.yaml" in err


def test_a_left_out_resource_is_hashed_never_parsed_nor_substituted() -> None:
    # As the controller: the revision covers it; its content is not read.
    the_crs = versioned_crs()
    the_crs["spec"]["resources"][2]["substitute"] = True
    broken = {**configmap("cpi-1-34"), "data": {"a": "a: ["}}
    sources = {"config": configmap("config", obj("c")), "cpi-1-33": configmap("cpi-1-33")}
    sources["cpi-1-34"] = broken
    at = ClusterVersion(parse_version("v1.33.0"), "")
    rendered = render_crs(parse_crs(the_crs), lambda k, n: sources[n], None, version=at)
    assert rendered.problems == ()
    assert [r.name for r in rendered.resources] == ["config", "cpi-1-33"]
    assert [(r.name, r.why) for r in rendered.left_out] == [("cpi-1-34", "outside")]
    everything = render_crs(parse_crs(the_crs), lambda k, n: sources[n], None)
    assert rendered.revision == everything.revision is not None
    assert everything.problems  # rendered without a version, it is parsed


FOLLOW = SAMPLES / "follow-the-version"


@pytest.mark.skipif(not FOLLOW.exists(), reason="no follow-the-version sample")
def test_the_follow_the_version_sample_renders_per_version(
    capsys: pytest.CaptureFixture[str],
) -> None:
    images = {}
    for version in ("v1.33.4", "v1.34.2"):
        code, out, _ = render(
            capsys, "-f", str(FOLLOW), "--kubernetes-version", version, "-o", "manifests"
        )
        assert code == 0
        images[version] = [
            c["image"]
            for o in yaml.safe_load_all(out)
            if o["kind"] == "Deployment"
            for c in o["spec"]["template"]["spec"]["containers"]
        ]
    assert images["v1.33.4"] != images["v1.34.2"] and all(images.values())


def test_a_table_with_no_resource_for_the_version_prints_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    crs = versioned_crs()
    crs["spec"]["resources"] = [r for r in crs["spec"]["resources"] if "kubernetesVersions" in r]
    path = write(tmp_path / "cpi.yaml", crs, *(configmap(n, obj(f"{n}-object")) for n in RANGES))
    code, out, err = render(capsys, "-f", path, "--kubernetes-version", "v1.36.0")
    assert code == 0 and "(NoResourceForVersion)" in err
    assert out == ""  # no header alone, as kubectl
    code, out, _ = render(capsys, "-f", path, "--kubernetes-version", "v1.34.0")
    assert code == 0 and "cpi-1-34-object" in out

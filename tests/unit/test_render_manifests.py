"""``crs-controller render -o manifests`` and what render says instead of failing
silently: the stream is the controller's apply bodies in its apply order, each after
a ``# Source:`` comment naming the CRS, the resource, its hash and the CRS's
revision (computed as the status computes it); a selection that matches nothing,
a source given twice, a Cluster API CRS and every error are said, with nothing on
stdout on an error."""

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
from crs_controller.app.commands.render import manifest_stream
from crs_controller.core.hashing import resource_hash
from crs_controller.core.manifests import APPLIED_BY, APPLIED_BY_LABEL, apply_body, parse_objects
from crs_controller.core.objects import parse_crs
from crs_controller.core.ordering import apply_order
from crs_controller.core.render import ClusterValues, render_crs
from crs_controller.core.rollout import revision

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
    path.write_text(yaml.safe_dump_all(docs))
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

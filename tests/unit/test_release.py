"""hack/release.py: the release artifacts in clusterctl's provider layout.

Covers: config/default renders every object of config/crd, config/rbac and
config/manager exactly once, in kustomize's order, with the image that
config/manager/kustomization.yaml names; the components name the namespace and the
image only through the CRS_CONTROLLER_NAMESPACE and CRS_CONTROLLER_IMAGE variables,
carry the CRDs and the provider label, and leave nothing of kustomize behind;
substituting the defaults (or other values) yields valid YAML; metadata.yaml names the
contract of the version being released; what the script does not handle (kustomization
fields, versions, stray variables, objects outside the namespace, kustomize vars
outside their varReference fields) fails loudly. The Runtime Extension
(config/extension) is released beside them: its Service, the Service the
ExtensionConfig calls and its CA Secret follow the same namespace variable.
"""

from __future__ import annotations

import copy
import importlib.util
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "config"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("release", ROOT / "hack" / "release.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


release = _load()
VERSION = release.project_version()
NAMESPACE_VAR = "${CRS_CONTROLLER_NAMESPACE:=crs-system}"
CLUSTER_SCOPED = {
    "Namespace",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}


def _documents(text: str) -> list[dict[str, Any]]:
    documents = [d for d in yaml.safe_load_all(text) if d is not None]
    assert all(isinstance(d, dict) for d in documents)
    return documents


def _config_objects() -> Counter[tuple[str, str]]:
    """What config/default includes, read straight from the files."""
    found: Counter[tuple[str, str]] = Counter()
    default = yaml.safe_load((CONFIG / "default" / "kustomization.yaml").read_text())
    for directory in (entry.removeprefix("../") for entry in default["resources"]):
        kustomization = yaml.safe_load((CONFIG / directory / "kustomization.yaml").read_text())
        for entry in kustomization["resources"]:
            path = CONFIG / directory / entry
            found.update((d["kind"], d["metadata"]["name"]) for d in _documents(path.read_text()))
    return found


def _image_entry() -> dict[str, str]:
    kustomization = yaml.safe_load((CONFIG / "manager" / "kustomization.yaml").read_text())
    (entry,) = kustomization["images"]
    return dict(entry)


def _manager_image(documents: list[dict[str, Any]]) -> str:
    (deployment,) = [d for d in documents if d["kind"] == "Deployment"]
    (manager,) = [
        c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "manager"
    ]
    return str(manager["image"])


@pytest.fixture(scope="module")
def built() -> tuple[str, str, list[dict[str, Any]]]:
    components, install, _ = release.build(VERSION)
    return components, install, _documents(components)


# --- rendering ------------------------------------------------------------------------


def test_config_default_renders_every_object_of_config_once() -> None:
    rendered = release.render(CONFIG / "default")
    assert Counter((d["kind"], d["metadata"]["name"]) for d in rendered) == _config_objects()
    kinds = [d["kind"] for d in rendered]
    # kustomize's order: the namespace and the CRDs before what uses them.
    assert kinds[0] == "Namespace"
    assert kinds.index("CustomResourceDefinition") < kinds.index("ServiceAccount")
    # Kinds kustomize does not rank (the admission policy, the NetworkPolicy) come
    # after the ranked ones.
    assert kinds[kinds.index("Deployment") + 1 :] == [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ValidatingAdmissionPolicyBinding",
        "ValidatingAdmissionPolicyBinding",
        "NetworkPolicy",
    ]


def test_the_image_is_named_once_in_config_manager() -> None:
    entry = _image_entry()
    rendered = release.render(CONFIG / "default")
    assert _manager_image(rendered) == f"{entry['newName']}:{entry['newTag']}"
    assert release.release_image(_manager_image(rendered), VERSION) == (
        f"{entry['newName']}:{VERSION}"
    )


# --- the components -------------------------------------------------------------------


def test_components_name_namespace_and_image_only_through_variables(built: Any) -> None:
    components, _, documents = built
    image_var = f"${{CRS_CONTROLLER_IMAGE:={_image_entry()['newName']}:{VERSION}}}"
    assert release.variables(components) == {
        "CRS_CONTROLLER_IMAGE": f"{_image_entry()['newName']}:{VERSION}",
        "CRS_CONTROLLER_NAMESPACE": "crs-system",
    }
    (namespace,) = [d for d in documents if d["kind"] == "Namespace"]
    assert namespace["metadata"]["name"] == NAMESPACE_VAR
    for document in documents:
        if document["kind"] not in CLUSTER_SCOPED:
            assert document["metadata"]["namespace"] == NAMESPACE_VAR, document["kind"]
        for subject in document.get("subjects", []):
            assert subject["namespace"] == NAMESPACE_VAR
    assert _manager_image(documents) == image_var


def test_components_hold_every_object_the_crds_and_the_provider_label(built: Any) -> None:
    _, _, documents = built
    assert Counter((d["kind"], d["metadata"]["name"]) for d in documents) == Counter(
        {
            (kind, NAMESPACE_VAR if kind == "Namespace" else name): count
            for (kind, name), count in _config_objects().items()
        }
    )
    crds = {d["metadata"]["name"] for d in documents if d["kind"] == "CustomResourceDefinition"}
    assert crds == {
        "clusterresourcesets.addons.crs.dev",
        "clusterresourcesetbindings.addons.crs.dev",
    }
    for document in documents:
        assert document["metadata"]["labels"]["cluster.x-k8s.io/provider"] == (
            "addon-crs-controller"
        )


def test_components_leave_nothing_of_kustomize_or_development_behind(built: Any) -> None:
    _, _, documents = built
    assert not {"Kustomization", "Component"} & {d["kind"] for d in documents}
    assert all(d["apiVersion"] and d["metadata"]["name"] for d in documents)
    for document in documents:
        for where, value in release.string_values(document):
            assert "$(" not in value, where  # kustomize vars
            outside_variables = release.VARIABLE.sub("", value)
            assert "crs-system" not in outside_variables, where
            assert not outside_variables.endswith(":latest"), where


def test_defaults_substituted_yield_valid_yaml_for_kubectl(built: Any) -> None:
    components, install, _ = built
    documents = _documents(install)
    assert "${" not in install
    assert [d["kind"] for d in documents] == [d["kind"] for d in _documents(components)]
    (namespace,) = [d for d in documents if d["kind"] == "Namespace"]
    assert namespace["metadata"]["name"] == "crs-system"
    assert {d["metadata"].get("namespace") for d in documents} == {None, "crs-system"}
    assert _manager_image(documents) == f"{_image_entry()['newName']}:{VERSION}"


def test_other_values_substitute_everywhere(built: Any) -> None:
    components, _, _ = built
    values = {"CRS_CONTROLLER_NAMESPACE": "addons", "CRS_CONTROLLER_IMAGE": "reg.example/c:v9"}
    documents = _documents(release.substitute(components, values))
    assert {d["metadata"].get("namespace") for d in documents} == {None, "addons"}
    assert {s["namespace"] for d in documents for s in d.get("subjects", [])} == {"addons"}
    assert _manager_image(documents) == "reg.example/c:v9"
    # The admission policies judge the subjects of the ClusterRoleBinding their
    # bindings name: the one that now binds the ServiceAccount in the new namespace.
    params = {
        d["spec"]["paramRef"]["name"]
        for d in documents
        if d["kind"] == "ValidatingAdmissionPolicyBinding"
    }
    (granted,) = [
        d
        for d in documents
        if d["kind"] == "ClusterRoleBinding" and d["metadata"]["name"] in params
    ]
    assert len(params) == 1
    assert granted["subjects"] == [
        {"kind": "ServiceAccount", "name": "crs-controller", "namespace": "addons"}
    ]
    # An empty value falls back to the default, as with clusterctl's NAME:=default.
    defaulted = _documents(release.substitute(components, {"CRS_CONTROLLER_NAMESPACE": ""}))
    assert {d["metadata"].get("namespace") for d in defaulted} == {None, "crs-system"}


def test_stray_variables_and_escaped_dollars_are_refused() -> None:
    base = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
    for value in ("${HOME}", "cost: $$5", "${CRS_CONTROLLER_OTHER:=x}"):
        with pytest.raises(release.ReleaseError):
            release.dump([{**base, "data": {"k": value}}])


def test_objects_outside_the_namespace_are_refused() -> None:
    rendered = release.render(CONFIG / "default")
    stray = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "elsewhere", "namespace": "kube-system"},
    }
    with pytest.raises(release.ReleaseError, match="not in namespace crs-system"):
        release.parameterize([*rendered, stray], VERSION)


def test_a_namespace_named_inside_a_string_is_refused() -> None:
    # The admission policy used to name the ServiceAccount in its CEL; a name inside a
    # string cannot follow the namespace variable, so the release refuses it.
    rendered = release.render(CONFIG / "default")
    note = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "note", "namespace": "crs-system"},
        "data": {"user": "system:serviceaccount:crs-system:crs-controller"},
    }
    with pytest.raises(release.ReleaseError, match=r"\.data\.user still names 'crs-system'"):
        release.parameterize([*rendered, note], VERSION)


# --- the Runtime Extension ------------------------------------------------------------

CA_ANNOTATION = "runtime.cluster.x-k8s.io/inject-ca-from-secret"


def test_the_extension_follows_the_namespace_variable() -> None:
    components, install, documents = release.build_extension(VERSION, "crs-system")
    assert release.variables(components) == {"CRS_CONTROLLER_NAMESPACE": "crs-system"}
    assert [(d["kind"], d["metadata"]["name"]) for d in documents] == [
        ("Service", "crs-controller-extension"),
        ("ExtensionConfig", "crs-controller"),
    ]
    for document in documents:
        assert document["metadata"]["labels"]["cluster.x-k8s.io/provider"] == (
            "addon-crs-controller"
        )
        for where, value in release.string_values(document):
            assert "$(" not in value, where  # the kustomize var is resolved
            assert "crs-system" not in release.VARIABLE.sub("", value), where
    values = {"CRS_CONTROLLER_NAMESPACE": "addons"}
    service, config = _documents(release.substitute(components, values))
    assert service["metadata"]["namespace"] == "addons"
    assert config["spec"]["clientConfig"]["service"] == {
        "name": service["metadata"]["name"],
        "namespace": "addons",
        "port": 443,
    }
    assert config["metadata"]["annotations"][CA_ANNOTATION] == "addons/crs-controller-extension-tls"
    # How crs-controller uninstall --delete-release finds it again.
    assert config["metadata"]["labels"]["app.kubernetes.io/name"] == "crs-controller"
    service, config = _documents(install)
    assert config["metadata"]["annotations"][CA_ANNOTATION] == (
        "crs-system/crs-controller-extension-tls"
    )
    assert service["metadata"]["namespace"] == "crs-system"


def test_the_extension_shares_the_add_on_components_variables(built: Any) -> None:
    components, _, _ = built
    extension, _, _ = release.build_extension(VERSION, "crs-system")
    shared = release.variables(extension).items()
    assert shared <= release.variables(components).items()


def test_the_extension_pointing_at_another_namespace_is_refused() -> None:
    rendered = release.render(CONFIG / "extension")
    assert release.parameterize_extension(rendered, "crs-system")
    for field in ("service", "annotation"):
        service, config = copy.deepcopy(rendered)
        if field == "service":
            config["spec"]["clientConfig"]["service"]["namespace"] = "elsewhere"
        else:
            config["metadata"]["annotations"][CA_ANNOTATION] = "elsewhere/tls"
        with pytest.raises(release.ReleaseError, match="must be in namespace crs-system"):
            release.parameterize_extension([service, config], "crs-system")


# --- metadata.yaml and versions -------------------------------------------------------


def test_metadata_names_the_contract_of_this_version() -> None:
    metadata = yaml.safe_load((ROOT / "metadata.yaml").read_text())
    assert metadata["apiVersion"] == "clusterctl.cluster.x-k8s.io/v1alpha3"
    assert metadata["kind"] == "Metadata"
    assert release.contract(metadata, VERSION) == "v1beta2"
    with pytest.raises(release.ReleaseError, match=r"no releaseSeries for v9\.9"):
        release.contract(metadata, "v9.9.0")


@pytest.mark.parametrize(
    ("given", "expected"),
    [("0.1.0", "v0.1.0"), ("v0.1.0", "v0.1.0"), ("1.2.0-rc.1", "v1.2.0-rc.1")],
)
def test_versions_take_the_tag_form(given: str, expected: str) -> None:
    assert release.normalize_version(given) == expected


@pytest.mark.parametrize("given", ["1.2", "latest", "v1.2.3+build", "01.2.3"])
def test_versions_that_are_not_semantic_are_refused(given: str) -> None:
    with pytest.raises(release.ReleaseError):
        release.normalize_version(given)


# --- what the renderer does not implement ---------------------------------------------

DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: d, namespace: ns}
spec:
  template:
    spec:
      initContainers: [{name: init, image: "crs-controller"}]
      containers:
        - {name: manager, image: "crs-controller:latest"}
        - {name: sidecar, image: "registry:5000/crs-controller:1.0"}
"""


def _kustomization(directory: Path, **fields: Any) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "deployment.yaml").write_text(DEPLOYMENT)
    body = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": ["deployment.yaml"],
        **fields,
    }
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(body))
    return directory


@pytest.mark.parametrize(
    "field",
    ["namespace", "namePrefix", "labels", "commonLabels", "patches", "configMapGenerator"],
)
def test_unsupported_kustomization_fields_fail_loudly(tmp_path: Path, field: str) -> None:
    directory = _kustomization(tmp_path, **{field: "x"})
    with pytest.raises(release.ReleaseError, match=field):
        release.render(directory)


def test_images_rewrite_every_container_with_that_name_only(tmp_path: Path) -> None:
    images = [{"name": "crs-controller", "newName": "reg.example/crs", "newTag": "v2"}]
    (deployment,) = release.render(_kustomization(tmp_path, images=images))
    spec = deployment["spec"]["template"]["spec"]
    assert [c["image"] for c in spec["initContainers"] + spec["containers"]] == [
        "reg.example/crs:v2",
        "reg.example/crs:v2",
        "registry:5000/crs-controller:1.0",
    ]


def test_an_object_included_twice_is_refused(tmp_path: Path) -> None:
    base = _kustomization(tmp_path / "base")
    _kustomization(tmp_path / "top", resources=["deployment.yaml", "../base"])
    with pytest.raises(release.ReleaseError, match="Deployment ns/d"):
        release.render(tmp_path / "top")
    assert release.render(base)


def test_vars_resolve_in_their_var_references_and_nowhere_else(tmp_path: Path) -> None:
    directory = _kustomization(
        tmp_path,
        vars=[{"name": "NS", "objref": {"kind": "Deployment", "version": "v1", "name": "d"},
               "fieldref": {"fieldpath": "metadata.namespace"}}],
        configurations=["config.yaml"],
    )  # fmt: skip
    reference = {"varReference": [{"kind": "Deployment", "path": "metadata/annotations"}]}
    (directory / "config.yaml").write_text(yaml.safe_dump(reference))
    annotated = "metadata: {name: d, namespace: ns, annotations: {a: $(NS)/x, b: $(OTHER)}}"
    text = DEPLOYMENT.replace("metadata: {name: d, namespace: ns}", annotated)
    (directory / "deployment.yaml").write_text(text)
    (deployment,) = release.render(directory)
    assert deployment["metadata"]["annotations"] == {"a": "ns/x", "b": "$(OTHER)"}
    # Where kustomize's own default references (container args) would resolve it.
    (directory / "deployment.yaml").write_text(
        text.replace("name: init,", "name: init, args: [$(NS)],")
    )
    with pytest.raises(release.ReleaseError, match=r"\$\(NS\) is where"):
        release.render(directory)


# --- the command ----------------------------------------------------------------------


def test_main_writes_metadata_components_install_and_the_extension(tmp_path: Path) -> None:
    assert release.main(["--out", str(tmp_path)]) == 0
    assert (tmp_path / "metadata.yaml").read_text() == (ROOT / "metadata.yaml").read_text()
    components = (tmp_path / "addon-components.yaml").read_text()
    assert set(release.variables(components)) == {
        "CRS_CONTROLLER_IMAGE",
        "CRS_CONTROLLER_NAMESPACE",
    }
    assert _documents((tmp_path / "install.yaml").read_text())
    extension = (tmp_path / "extension-components.yaml").read_text()
    assert release.variables(extension) == {"CRS_CONTROLLER_NAMESPACE": "crs-system"}
    kinds = [d["kind"] for d in _documents((tmp_path / "extension-install.yaml").read_text())]
    assert kinds == ["Service", "ExtensionConfig"]


def test_print_image_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert release.main(["--out", str(tmp_path / "out"), "--print-image"]) == 0
    assert capsys.readouterr().out == f"{_image_entry()['newName']}:{VERSION}\n"
    assert not (tmp_path / "out").exists()

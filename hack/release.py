"""Release artifacts in Cluster API's clusterctl provider layout, written by hack/release.sh.

``--out DIR`` receives five files:

- ``metadata.yaml``: the repository's top-level metadata.yaml (release series to Cluster
  API contract), checked to hold the series of the version being released.
- ``addon-components.yaml``: config/default rendered as ``kustomize build`` would, with
  the image and the namespace turned into clusterctl variables
  ``${CRS_CONTROLLER_IMAGE:=<repository>:<version>}`` and
  ``${CRS_CONTROLLER_NAMESPACE:=crs-system}``, and every object labelled
  ``cluster.x-k8s.io/provider: addon-crs-controller`` (the label clusterctl itself puts
  on an add-on provider named crs-controller). This is what ``clusterctl init --addon``
  reads.
- ``install.yaml``: the same objects with the variables' defaults filled in, for plain
  ``kubectl apply -f``. GNU envsubst does not understand ``:=`` defaults; to install
  with other values without clusterctl's init, run
  ``clusterctl generate yaml --from addon-components.yaml`` with the variables set.
- ``extension-components.yaml``: config/extension (the Runtime Extension's Service and
  the ExtensionConfig registering it with Cluster API) rendered the same way, its
  namespace (the Service's, the ExtensionConfig's ``clientConfig.service`` and its CA
  Secret annotation) the same ``CRS_CONTROLLER_NAMESPACE`` variable. Not part of the
  add-on components: it needs Cluster API's RuntimeSDK and a serving certificate, so
  it is applied beside them, with the same variables
  (``clusterctl generate yaml --from extension-components.yaml``).
- ``extension-install.yaml``: the same with the defaults filled in.

No kustomize binary is needed: the renderer below implements the kustomization fields
config/ uses (resources, images, vars; of configurations only ``varReference``, the
fields vars are resolved in: the rest tune kustomize's name and namespace
transformers, which config/default and config/extension do not run, so they change
nothing here) and refuses any other, so it cannot silently differ from kustomize; its
YAML before the variables is byte for byte what kustomize 5.5 writes.
hack/release.sh compares the objects with ``kubectl kustomize`` output when that is
available (``--compare-with``, ``--compare-extension-with``).
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "config" / "default"
EXTENSION = ROOT / "config" / "extension"
METADATA = ROOT / "metadata.yaml"
PYPROJECT = ROOT / "pyproject.toml"

COMPONENTS_FILE = "addon-components.yaml"  # clusterctl's name for an add-on provider
INSTALL_FILE = "install.yaml"
EXTENSION_COMPONENTS_FILE = "extension-components.yaml"
EXTENSION_INSTALL_FILE = "extension-install.yaml"
METADATA_FILE = "metadata.yaml"

IMAGE_VARIABLE = "CRS_CONTROLLER_IMAGE"
NAMESPACE_VARIABLE = "CRS_CONTROLLER_NAMESPACE"
PROVIDER_LABEL = "cluster.x-k8s.io/provider"
CA_ANNOTATION = "runtime.cluster.x-k8s.io/inject-ca-from-secret"  # <namespace>/<Secret>
PROVIDER_NAME = "addon-crs-controller"  # clusterctl: "addon-" + the provider's name
MANAGER_CONTAINER = "manager"  # the container clusterctl's contract calls "manager"

KUSTOMIZE_API = "kustomize.config.k8s.io/v1beta1"
KUSTOMIZATION_FIELDS = {"apiVersion", "kind", "resources", "images", "configurations", "vars"}
IMAGE_FIELDS = {"name", "newName", "newTag"}
VAR_FIELDS = {"name", "objref", "fieldref"}
KUSTOMIZE_VAR = re.compile(r"\$\((?P<name>[A-Za-z_][A-Za-z0-9_]*)\)")
CONTAINER_LISTS = ("containers", "initContainers")

METADATA_API = "clusterctl.cluster.x-k8s.io/v1alpha3"
CONTRACTS = ("v1beta1", "v1beta2")

# Kinds without a namespace, as clusterctl and kustomize list them (clusterctl moves
# every other kind to its target namespace).
CLUSTER_SCOPED = {
    "APIService",
    "CertificateSigningRequest",
    "ClusterRole",
    "ClusterRoleBinding",
    "CSIDriver",
    "CSINode",
    "CustomResourceDefinition",
    "ExtensionConfig",
    "MutatingWebhookConfiguration",
    "Namespace",
    "Node",
    "PersistentVolume",
    "PodSecurityPolicy",
    "PriorityClass",
    "RuntimeClass",
    "StorageClass",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "ValidatingWebhookConfiguration",
    "VolumeAttachment",
}

# kustomize's default ("legacy") output order: these kinds first, in this order, then
# every other kind, then webhook configurations; ties by group_version_kind, namespace
# and name.
ORDER_FIRST = [
    "Namespace",
    "ResourceQuota",
    "StorageClass",
    "CustomResourceDefinition",
    "ServiceAccount",
    "PodSecurityPolicy",
    "Role",
    "ClusterRole",
    "RoleBinding",
    "ClusterRoleBinding",
    "ConfigMap",
    "Secret",
    "Service",
    "LimitRange",
    "PriorityClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "Deployment",
    "StatefulSet",
    "CronJob",
    "PodDisruptionBudget",
]
ORDER_LAST = ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]

VERSION = re.compile(
    r"^v?(?P<major>0|[1-9]\d*)\.(?P<minor>0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?$"
)
# What clusterctl (drone/envsubst) substitutes; ${NAME:=default} is all we write.
VARIABLE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::?[=-](?P<default>[^}]*))?\}")

Obj = dict[str, Any]


class ReleaseError(Exception):
    """A release input that does not fit; the message names the file and the field."""


# --- rendering config/ as kustomize would --------------------------------------------


def render(directory: Path) -> list[Obj]:
    """``kustomize build directory``, for the kustomization fields config/ uses."""
    directory = directory.resolve()
    documents = _build(directory)
    _resolve_vars(list(_kustomizations(directory)), documents)
    return sorted(documents, key=_legacy_order)


def _kustomizations(directory: Path) -> Iterator[tuple[Path, Obj]]:
    """The kustomization in ``directory`` and those of the directories it includes."""
    path = directory / "kustomization.yaml"
    kustomization = yaml.safe_load(path.read_text()) or {}
    yield path, kustomization
    for entry in kustomization.get("resources") or []:
        if (directory / entry).is_dir():
            yield from _kustomizations((directory / entry).resolve())


def _resolve_vars(kustomizations: list[tuple[Path, Obj]], documents: list[Obj]) -> None:
    """kustomize's ``vars``, resolved once over everything built, as kustomize does:
    ``$(NAME)`` becomes the field the var names, in the fields the configurations'
    ``varReference`` lists. A declared var left anywhere else fails: kustomize's own
    default var references (container args, env) are not implemented here."""
    values: dict[str, str] = {}
    paths: list[tuple[str, list[str]]] = []
    for path, kustomization in kustomizations:
        for var in kustomization.get("vars") or []:
            values[var["name"]] = _var_value(var, documents, path)
        for entry in kustomization.get("configurations") or []:
            config = yaml.safe_load((path.parent / entry).read_text()) or {}
            paths += [(f["kind"], f["path"].split("/")) for f in config.get("varReference", [])]
    for document in documents:
        for kind, steps in paths:
            if document["kind"] == kind:
                _substitute_at(document, steps, values)
        _refuse_unresolved(document, values)


def _refuse_unresolved(document: Obj, values: Mapping[str, str]) -> None:
    for where, value in string_values(document):
        names = {m["name"] for m in KUSTOMIZE_VAR.finditer(value)} & set(values)
        if names:
            raise ReleaseError(
                f"{_describe(document)}: {where}: $({min(names)}) is where hack/release.py "
                "does not resolve vars"
            )


def _var_value(var: Obj, documents: list[Obj], kustomization: Path) -> str:
    """The value of one var: the field ``fieldref.fieldpath`` (dotted) of the one
    object ``objref`` names."""
    ref = var.get("objref") or {}
    if set(var) - VAR_FIELDS or not {"kind", "name"} <= set(ref):
        raise ReleaseError(f"{kustomization}: var {var.get('name')}: unsupported form")
    found = [
        d for d in documents
        if (d["kind"], d["metadata"]["name"]) == (ref["kind"], ref["name"])
        and d["apiVersion"].rpartition("/")[2] == ref.get("version", d["apiVersion"])
    ]  # fmt: skip
    if len(found) != 1:
        raise ReleaseError(f"{kustomization}: var {var['name']} names {len(found)} objects")
    node: Any = found[0]
    for step in ((var.get("fieldref") or {}).get("fieldpath") or "metadata.name").split("."):
        node = node.get(step) if isinstance(node, dict) else None
    if not isinstance(node, str):
        raise ReleaseError(f"{kustomization}: var {var['name']}: no such string field")
    return node


def _substitute_at(node: Any, steps: list[str], values: Mapping[str, str]) -> Any:
    """``node`` with ``$(NAME)`` replaced in the strings at ``steps`` (a dict or list
    there: in each of its strings)."""
    if steps:
        if isinstance(node, dict) and steps[0] in node:
            node[steps[0]] = _substitute_at(node[steps[0]], steps[1:], values)
        return node
    if isinstance(node, dict):
        return {k: _substitute_at(v, [], values) for k, v in node.items()}
    if isinstance(node, list):
        return [_substitute_at(v, [], values) for v in node]
    if isinstance(node, str):
        return KUSTOMIZE_VAR.sub(lambda m: values.get(m["name"], m.group(0)), node)
    return node


def _build(directory: Path) -> list[Obj]:
    path = directory / "kustomization.yaml"
    if not path.is_file():
        raise ReleaseError(f"{directory}: no kustomization.yaml")
    kustomization = yaml.safe_load(path.read_text()) or {}
    unsupported = sorted(set(kustomization) - KUSTOMIZATION_FIELDS)
    if unsupported:
        raise ReleaseError(
            f"{path}: hack/release.py does not implement {', '.join(unsupported)} "
            f"(it renders {', '.join(sorted(KUSTOMIZATION_FIELDS))}); extend it or use kustomize"
        )
    if (kustomization.get("apiVersion"), kustomization.get("kind")) != (
        KUSTOMIZE_API,
        "Kustomization",
    ):
        raise ReleaseError(f"{path}: not a {KUSTOMIZE_API} Kustomization")
    documents: list[Obj] = []
    seen: dict[tuple[str, str, str, str], str] = {}
    for entry in kustomization.get("resources") or []:
        target = (directory / entry).resolve()
        for document in _build(target) if target.is_dir() else _read(target, path):
            key = _identity(document)
            if key in seen:
                raise ReleaseError(f"{path}: {_describe(document)} comes from {seen[key]} too")
            seen[key] = str(target)
            documents.append(document)
    for image in kustomization.get("images") or []:
        _set_image(documents, image, path)
    return documents


def _read(path: Path, kustomization: Path) -> list[Obj]:
    if not path.is_file():
        raise ReleaseError(f"{kustomization}: resource {path} does not exist")
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    for document in documents:
        if not isinstance(document, dict) or not {"apiVersion", "kind"} <= set(document):
            raise ReleaseError(f"{path}: a document that is not a Kubernetes object")
        if "items" in document or document["kind"] in ("Kustomization", "Component"):
            raise ReleaseError(f"{path}: hack/release.py does not expand {document['kind']}")
        if not (document.get("metadata") or {}).get("name"):
            raise ReleaseError(f"{path}: a {document['kind']} without metadata.name")
    return documents


def _set_image(documents: list[Obj], image: Mapping[str, str], kustomization: Path) -> None:
    """kustomize's ``images:``: give every container image with that name the new name
    and tag."""
    if "name" not in image or set(image) - IMAGE_FIELDS:
        raise ReleaseError(
            f"{kustomization}: images entry {dict(image)}: hack/release.py implements "
            f"{', '.join(sorted(IMAGE_FIELDS))} (name required)"
        )
    for container in _containers(documents):
        name, tag, digest = split_image(str(container.get("image", "")))
        if name != image["name"]:
            continue
        if digest:
            raise ReleaseError(f"{kustomization}: image {container['image']} has a digest")
        tag = image.get("newTag", tag)
        container["image"] = image.get("newName", name) + (f":{tag}" if tag else "")


def split_image(image: str) -> tuple[str, str, str]:
    """``registry:5000/repo:tag@sha256:…`` into name, tag and digest."""
    image, _, digest = image.partition("@")
    slash = image.rfind("/")
    colon = image.rfind(":")
    if colon > slash:
        return image[:colon], image[colon + 1 :], digest
    return image, "", digest


def _containers(node: Any) -> Iterator[Obj]:
    if isinstance(node, list):
        for item in node:
            yield from _containers(item)
    elif isinstance(node, dict):
        for key, value in node.items():
            if key in CONTAINER_LISTS and isinstance(value, list):
                yield from (c for c in value if isinstance(c, dict))
            else:
                yield from _containers(value)


def _identity(document: Obj) -> tuple[str, str, str, str]:
    meta = document.get("metadata") or {}
    group = document["apiVersion"].rpartition("/")[0]
    return group, document["kind"], str(meta.get("namespace") or ""), str(meta["name"])


def _legacy_order(document: Obj) -> tuple[int, str, str, str]:
    kind = document["kind"]
    if kind in ORDER_FIRST:
        rank = ORDER_FIRST.index(kind) - len(ORDER_FIRST)
    elif kind in ORDER_LAST:
        rank = 1 + ORDER_LAST.index(kind)
    else:
        rank = 0
    group, _, version = document["apiVersion"].rpartition("/")
    gvk = f"{group or '~G'}_{version}_{kind}"
    _, _, namespace, name = _identity(document)
    return rank, gvk, namespace, name


def _describe(document: Obj) -> str:
    _, kind, namespace, name = _identity(document)
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


# --- turning the rendering into the release -----------------------------------------


def variable(name: str, default: str) -> str:
    return f"${{{name}:={default}}}"


def release_image(image: str, version: str) -> str:
    """The development image (``crs-controller:latest``) with the release's tag."""
    name, _, _ = split_image(image)
    return f"{name}:{version}"


def parameterize(documents: list[Obj], version: str) -> list[Obj]:
    """The rendered objects as clusterctl components: the namespace and the manager's
    image become variables, every object carries the provider label. Fails on anything
    that would leave the old namespace or image behind."""
    documents = copy.deepcopy(documents)
    namespace = _only_namespace(documents)
    namespace_var = variable(NAMESPACE_VARIABLE, namespace)
    manager = _only_manager(documents)
    dev_image = manager["image"]
    manager["image"] = variable(IMAGE_VARIABLE, release_image(dev_image, version))
    for document in documents:
        _label_and_place(document, namespace, namespace_var)
    _refuse_leftovers(documents, (namespace, dev_image))
    return documents


def parameterize_extension(documents: list[Obj], namespace: str) -> list[Obj]:
    """config/extension's objects as components beside the add-on's: ``namespace``
    (the add-on components' default) becomes the namespace variable wherever they name
    it (the Service's namespace, the ExtensionConfig's Service and CA Secret), every
    object carries the provider label. Fails on anything that would leave it behind."""
    documents = copy.deepcopy(documents)
    namespace_var = variable(NAMESPACE_VARIABLE, namespace)
    for document in documents:
        _label_and_place(document, namespace, namespace_var)
        if document["kind"] == "ExtensionConfig":
            _point_at(document, namespace, namespace_var)
    _refuse_leftovers(documents, (namespace,))
    return documents


def _point_at(config: Obj, namespace: str, namespace_var: str) -> None:
    """The ExtensionConfig's Service and CA Secret, in ``namespace``, in the variable;
    fails on either outside it (the variable would not move them with the Service)."""
    service = ((config.get("spec") or {}).get("clientConfig") or {}).get("service") or {}
    annotations = config["metadata"].get("annotations") or {}
    secret_namespace, _, secret = str(annotations.get(CA_ANNOTATION, "")).partition("/")
    if (service.get("namespace"), secret_namespace) != (namespace, namespace):
        raise ReleaseError(
            f"{_describe(config)}: its Service and CA Secret must be in namespace {namespace}"
        )
    service["namespace"] = namespace_var
    annotations[CA_ANNOTATION] = f"{namespace_var}/{secret}"


def _only_namespace(documents: list[Obj]) -> str:
    """The name of the one Namespace object (clusterctl takes the target namespace
    from the only Namespace object)."""
    namespaces = [d for d in documents if d["kind"] == "Namespace"]
    if len(namespaces) != 1:
        raise ReleaseError(f"config/default renders {len(namespaces)} Namespaces, not 1")
    name: str = namespaces[0]["metadata"]["name"]
    return name


def _only_manager(documents: list[Obj]) -> Obj:
    """The one container named "manager", the one whose image is released."""
    managers = [c for c in _containers(documents) if c.get("name") == MANAGER_CONTAINER]
    if len(managers) != 1:
        raise ReleaseError(f"config/default renders {len(managers)} 'manager' containers, not 1")
    return managers[0]


def _label_and_place(document: Obj, namespace: str, namespace_var: str) -> None:
    """Give one object the provider label, and its namespace (its own name for the
    Namespace, its subjects') as the variable; fails on any other namespace."""
    meta = document["metadata"]
    if document["kind"] == "Namespace":
        meta["name"] = namespace_var
    elif document["kind"] not in CLUSTER_SCOPED:
        if meta.get("namespace") != namespace:
            raise ReleaseError(f"{_describe(document)} is not in namespace {namespace}")
        meta["namespace"] = namespace_var
    for subject in document.get("subjects") or []:
        if "namespace" in subject:
            if subject["namespace"] != namespace:
                raise ReleaseError(f"{_describe(document)}: a subject outside {namespace}")
            subject["namespace"] = namespace_var
    meta.setdefault("labels", {})[PROVIDER_LABEL] = PROVIDER_NAME


def _refuse_leftovers(documents: list[Obj], leftovers: tuple[str, ...]) -> None:
    """Fail when a string outside the variables still names one of ``leftovers``."""
    for document in documents:
        for where, value in string_values(document):
            for leftover in leftovers:
                if leftover in VARIABLE.sub("", value):
                    raise ReleaseError(
                        f"{_describe(document)}: {where} still names {leftover!r}; "
                        "teach hack/release.py to turn it into a variable"
                    )


def string_values(node: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """Every string in an object, with its path (``.spec.template…[0].image``)."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from string_values(value, f"{where}.{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from string_values(value, f"{where}[{index}]")
    elif isinstance(node, str):
        yield where, node


# --- text: YAML out, variables in ----------------------------------------------------


class _Dumper(yaml.SafeDumper):
    """Quotes strings the way kustomize (go-yaml) does: double quotes for one that would
    otherwise read as another type ("1", "True", ""), single quotes for the rest."""

    def choose_scalar_style(self) -> str:
        style: str = super().choose_scalar_style()
        assert isinstance(self.event, yaml.ScalarEvent)
        return '"' if style == "'" and not self.event.implicit[0] else style


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if VARIABLE.fullmatch(value):
        # Quoted, so a substituted value stays a string whatever it looks like.
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style='"')
    if "\n" in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_Dumper.add_representer(str, _represent_str)


def dump(documents: list[Obj]) -> str:
    """Multi-document YAML as kustomize writes it (keys sorted, the same quoting and folding)."""
    text = "---\n".join(
        yaml.dump(d, Dumper=_Dumper, sort_keys=True, width=80, allow_unicode=True)
        for d in documents
    )
    # clusterctl runs the whole file through drone/envsubst: "$$" would lose a dollar
    # and any other "${" would be a variable.
    if "$$" in text:
        raise ReleaseError("the components contain '$$', which clusterctl would unescape")
    stray = {m.group(0) for m in re.finditer(r"\$\{[^}]*\}?", text)} - {
        m.group(0) for m in VARIABLE.finditer(text)
    }
    names = {m.group("name") for m in VARIABLE.finditer(text)}
    if stray or names - {IMAGE_VARIABLE, NAMESPACE_VARIABLE}:
        raise ReleaseError(f"the components contain unexpected variables: {sorted(stray | names)}")
    return text


def substitute(text: str, values: Mapping[str, str] | None = None) -> str:
    """What clusterctl does to the components: each ``${NAME:=default}`` becomes the
    value given for NAME, or its default when that is unset or empty."""
    values = values or {}

    def one(match: re.Match[str]) -> str:
        name, default = match.group("name"), match.group("default")
        value = values.get(name) or default
        if value is None:
            raise ReleaseError(f"variable {name} has no value and no default")
        return value

    return VARIABLE.sub(one, text)


def variables(text: str) -> dict[str, str]:
    """The variables in a components file and their defaults, as clusterctl lists them."""
    return {m.group("name"): m.group("default") or "" for m in VARIABLE.finditer(text)}


# --- versions and metadata.yaml ------------------------------------------------------


def normalize_version(version: str) -> str:
    """``0.1.0`` or ``v0.1.0`` to the tag form clusterctl and the image use, ``v0.1.0``."""
    if not VERSION.fullmatch(version):
        raise ReleaseError(f"version {version!r} is not semantic (v0.1.0, v1.2.0-rc.1)")
    return version if version.startswith("v") else f"v{version}"


def project_version(pyproject: Path = PYPROJECT) -> str:
    return normalize_version(tomllib.loads(pyproject.read_text())["project"]["version"])


def contract(metadata: Obj, version: str) -> str:
    """The Cluster API contract metadata.yaml names for the version's release series."""
    if (metadata.get("apiVersion"), metadata.get("kind")) != (METADATA_API, "Metadata"):
        raise ReleaseError(f"metadata.yaml: want apiVersion {METADATA_API}, kind Metadata")
    match = VERSION.fullmatch(version)
    if match is None:
        raise ReleaseError(f"version {version!r} is not semantic")
    major, minor = int(match["major"]), int(match["minor"])
    for series in metadata.get("releaseSeries") or []:
        if (series.get("major"), series.get("minor")) == (major, minor):
            if series.get("contract") not in CONTRACTS:
                raise ReleaseError(f"metadata.yaml: v{major}.{minor}: contract not in {CONTRACTS}")
            return str(series["contract"])
    raise ReleaseError(
        f"metadata.yaml has no releaseSeries for v{major}.{minor}: add it (with its "
        "contract) before releasing, or clusterctl refuses the release"
    )


# --- the command ---------------------------------------------------------------------


def _header(lines: list[str]) -> str:
    # No dollar-brace in here: clusterctl substitutes comments too.
    return "".join(f"# {line}".rstrip() + "\n" for line in lines)


BINDINGS_CRD = "clusterresourcesetbindings.addons.crs.dev"


def release_order(documents: list[Obj]) -> list[Obj]:
    """kustomize's order (the Namespace and the CRDs before what needs them, for
    kubectl apply) with the bindings CRD moved after the ClusterResourceSet CRD: a
    ``kubectl delete -f`` reaches the inventories last. One file cannot also put the
    Namespace and the controller's rights last for kubectl delete (apply needs them
    first), so docs/install.md#uninstall deletes the sets first (crs-controller
    uninstall) and the release after."""
    bindings = [d for d in documents if d["metadata"]["name"] == BINDINGS_CRD]
    rest = [d for d in documents if d["metadata"]["name"] != BINDINGS_CRD]
    crds = [i for i, d in enumerate(rest) if d["kind"] == "CustomResourceDefinition"]
    at = crds[-1] + 1 if crds else 0
    return [*rest[:at], *bindings, *rest[at:]]


def build(version: str) -> tuple[str, str, list[Obj]]:
    """The components text (with variables), the install text (defaults) and the objects."""
    documents = parameterize(release_order(render(CONFIG)), version)
    return _texts(
        documents,
        [
            f"crs-controller {version}: the Cluster API add-on provider components, rendered",
            "from config/default by hack/release.sh. For clusterctl init --addon crs-controller",
            "(provider type AddonProvider) or clusterctl generate yaml --from this file.",
        ],
        version,
        (COMPONENTS_FILE, INSTALL_FILE),
    )


def build_extension(version: str, namespace: str) -> tuple[str, str, list[Obj]]:
    """The Runtime Extension's components (config/extension, its namespace the same
    variable as the add-on components', whose default is ``namespace``), its install
    text and its objects."""
    documents = parameterize_extension(render(EXTENSION), namespace)
    return _texts(
        documents,
        [
            f"crs-controller {version}: the Runtime Extension's Service and the ExtensionConfig",
            "registering it with Cluster API (feature gate RuntimeSDK), rendered from",
            f"config/extension by hack/release.sh. Apply beside {COMPONENTS_FILE}, with the",
            "same variables: clusterctl generate yaml --from this file. It needs the Secret",
            "<namespace>/crs-controller-extension-tls (docs/install.md, The Runtime Extension).",
        ],
        version,
        (EXTENSION_COMPONENTS_FILE, EXTENSION_INSTALL_FILE),
    )


def _texts(
    documents: list[Obj], about: list[str], version: str, files: tuple[str, str]
) -> tuple[str, str, list[Obj]]:
    """The components file (``about``, the variables, the objects) and the install
    file (the same with the defaults filled in) of ``documents``."""
    components_file, install_file = files
    body = dump(documents)
    defaults = variables(body)
    listed = [f"  {name} (default {value})" for name, value in sorted(defaults.items())]
    components = _header(
        [
            *about,
            "Variables, in clusterctl's NAME:=default form:",
            *listed,
            f"For plain kubectl apply -f, use {install_file} (the same, defaults filled in).",
        ]
    )
    install = _header(
        [
            f"crs-controller {version}: kubectl apply -f {install_file}",
            f"The objects of {components_file} with its variables' defaults:",
            *listed,
            f"For other values: clusterctl generate yaml --from {components_file}, the",
            "variables set in the environment, piped to kubectl apply -f -.",
        ]
    )
    return components + body, install + substitute(body), documents


def _compare(expected_path: Path, directory: Path = CONFIG) -> None:
    """Fail unless kustomize's own rendering equals ours, object for object, in order."""
    expected = [d for d in yaml.safe_load_all(expected_path.read_text()) if d is not None]
    ours = render(directory)
    if expected != ours:
        names = [_describe(d) for d in ours]
        theirs = [_describe(d) for d in expected]
        differing = next(
            (_describe(a) for a, b in zip(ours, expected, strict=False) if a != b), "count"
        )
        raise ReleaseError(
            f"hack/release.py renders config/{directory.name} differently from kustomize "
            f"(first difference: {differing}); ours {names}, kustomize's {theirs}"
        )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hack/release.py", description=__doc__.split("\n")[0])
    parser.add_argument("--version", help="release version (default: pyproject's, as v0.1.0)")
    parser.add_argument("--out", type=Path, default=ROOT / "out", help="output directory")
    parser.add_argument("--compare-with", type=Path, help="kustomize build config/default output")
    parser.add_argument(
        "--compare-extension-with", type=Path, help="kustomize build config/extension output"
    )
    parser.add_argument(
        "--print-image", action="store_true", help="print the release image and write nothing"
    )
    return parser


def _described(documents: list[Obj]) -> str:
    return ", ".join(f"{d['kind']}/{d['metadata']['name']}" for d in documents)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        version = normalize_version(args.version) if args.version else project_version()
        metadata_text = METADATA.read_text()
        contract_version = contract(yaml.safe_load(metadata_text), version)
        components, install, documents = build(version)
        image = variables(components)[IMAGE_VARIABLE]
        if args.print_image:
            print(image)
            return 0
        namespace = variables(components)[NAMESPACE_VARIABLE]
        extension, extension_install, extension_documents = build_extension(version, namespace)
        for expected, directory in (
            (args.compare_with, CONFIG),
            (args.compare_extension_with, EXTENSION),
        ):
            if expected is not None:
                _compare(expected, directory)
                print(f"config/{directory.name}: rendered exactly as kustomize renders it")
    except (ReleaseError, OSError, yaml.YAMLError) as exc:
        print(f"hack/release.py: {exc}", file=sys.stderr)
        return 2
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    (out / METADATA_FILE).write_text(metadata_text)
    (out / COMPONENTS_FILE).write_text(components)
    (out / INSTALL_FILE).write_text(install)
    (out / EXTENSION_COMPONENTS_FILE).write_text(extension)
    (out / EXTENSION_INSTALL_FILE).write_text(extension_install)
    shown = out.relative_to(ROOT) if out.is_relative_to(ROOT) else out
    print(f"{shown / METADATA_FILE}: {version} is Cluster API contract {contract_version}")
    print(f"{shown / COMPONENTS_FILE}: {len(documents)} objects: {_described(render(CONFIG))}")
    for name, default in sorted(variables(components).items()):
        print(f"  variable {name}, default {default}")
    print(f"{shown / INSTALL_FILE}: the same with the defaults filled in, for kubectl apply -f")
    print(
        f"{shown / EXTENSION_COMPONENTS_FILE}: {len(extension_documents)} objects: "
        f"{_described(render(EXTENSION))}, the same namespace variable; "
        f"{shown / EXTENSION_INSTALL_FILE}: with its default"
    )
    print(f"image {image}: docker build -t {image} .")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""docs/install.md's "Uninstall" section, followed as written, on a management server
of its own (it deletes the CRDs every other test needs; it shares their etcd under a
prefix of its own, and the workload servers).

The release is rendered as hack/release.sh renders it and applied in file order, as
`kubectl apply -f out/install.yaml` would (the Deployment included: no kubelet runs it,
so the test starts the process with its arguments and its ServiceAccount's rights).
The "Upgrading the controller" section's one command, applied over a running
install with a second pod standing by: the old pod stops, the new one takes the
Lease and looks at the cluster again, and writes nothing to the workload cluster or
to the binding.
A `deletionPolicy: Delete` set is applied to a workload cluster. Then every
`crs-controller` line of the section's commands runs, in order, up to and including
the one-step variant (`--delete-release`): the `kubectl delete` lines (the
ExtensionConfig, then the release) are the two-step variant's last steps, which the
one-step line replaces. Afterwards the set's object
is gone from the workload cluster (the inventory was used), no CRD is left, not even
Terminating, and every object of the release is gone (the Namespace is Terminating:
the test bed runs no namespace controller to empty it).

The "Upgrading the controller" section's one command is applied over a running
install with a second pod standing by: the old pod stops, the new one takes the
Lease and looks at the cluster again, and writes nothing to the workload cluster or
to the binding.

The "When the controller is already gone" way out, its commands run as written
(kubectl and jq themselves, the set's name and namespace where they say NAME and
NS), with two `Delete` sets applied and the controller stopped: one set, deleted and
stuck `Terminating` behind its finalizer, goes with the `kubectl patch` line, the
other with `uninstall --force`; the bindings listed as written record both sets'
objects where the section says, the `jq` line finds them on the workload cluster,
and once they are deleted there both CRDs go without staying Terminating."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from crs_controller.app.cli import main
from crs_controller.testbed import ControlPlane, Server, TestbedClient, wait_for
from crs_controller.testbed.clusters import install_crds
from crs_controller.testbed.controller import SA_USER, SYSTEM_NAMESPACE, ControllerProcess

from .support import (
    CRS_API,
    TIMEOUT,
    WORKLOAD_USER,
    add_cluster,
    audit_caught_up,
    configmap_obj,
    crs_obj,
    manifests,
    reconciles,
    source_configmap,
    unique,
    wait_condition,
    wait_object,
    writes_by,
)

REPO_ROOT = Path(__file__).resolve().parents[3]
INSTALL_DOC = REPO_ROOT / "docs" / "install.md"
CAPI_CRDS = sorted((REPO_ROOT / "config" / "testing").glob("*.yaml"))
RELEASE_FILE = "out/install.yaml"  # as the docs name it
CRD_API = "apiextensions.k8s.io/v1"
LEASE_API = "coordination.k8s.io/v1"
TEAM = "team-a"
Obj = dict[str, Any]


def section_commands(heading: str) -> list[str]:
    """The command lines of the first ``sh`` block under ``## heading`` in
    docs/install.md, comments dropped."""
    text = INSTALL_DOC.read_text()
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert match, f"no sh block under {heading}"
    lines = (line.split("#", 1)[0].strip() for line in match.group(1).splitlines())
    return [line for line in lines if line]


def release(tmp_path: Path) -> Path:
    """out/install.yaml as hack/release.sh writes it."""
    out = tmp_path / "out"
    script = REPO_ROOT / "hack" / "release.py"
    done = subprocess.run(
        [sys.executable, str(script), "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return out / "install.yaml"


def apply_in_file_order(client: TestbedClient, path: Path) -> list[Obj]:
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d]
    crds = [d for d in documents if d["kind"] == "CustomResourceDefinition"]
    crd_file = path.parent / "crds.yaml"
    crd_file.write_text(yaml.safe_dump_all(crds))
    install_crds(client, [crd_file, *CAPI_CRDS])
    for document in documents:
        client.apply(document)
    return documents


@pytest.fixture
def scratch(control_plane: ControlPlane) -> Iterator[Server]:
    with control_plane.scratch_server(f"scratch-{uuid.uuid4().hex[:6]}") as server:
        yield server


def delete_set_applied(
    mgmt: TestbedClient, workload: Server, workload_client: TestbedClient, user: str = WORKLOAD_USER
) -> str:
    """A Delete set applied to one workload cluster (reached as ``user``); the name of
    its object there."""
    namespace = TEAM
    mgmt.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    name = unique("docs-uninstall")
    mgmt.create(source_configmap(namespace, "addon", {"a": manifests(configmap_obj(name))}))
    crs = crs_obj(namespace, "addon", [("ConfigMap", "addon")], {"team": "a"}, mode="Reconcile")
    crs["spec"]["deletionPolicy"] = "Delete"
    mgmt.create(crs)
    add_cluster(mgmt, workload, namespace, "cluster-1", {"team": "a"}, user=user)
    wait_condition(mgmt, namespace, "addon", "Ready", "True", "Applied")
    wait_object(workload_client, "v1", "ConfigMap", name, "default")
    return name


def follow(commands: list[str], kubeconfig: Path, release_file: Path) -> list[str]:
    """Run each ``crs-controller`` line as written (the release file where the docs
    say out/install.yaml, and the test's kubeconfig); returns the lines not run."""
    skipped = []
    for line in commands:
        words = shlex.split(line)
        if words[0] != "crs-controller":
            skipped.append(line)
            continue
        argv = [str(release_file) if w == RELEASE_FILE else w for w in words[1:]]
        assert main([*argv, "--kubeconfig", str(kubeconfig), "--timeout", "120s"]) == 0, line
    return skipped


def test_the_uninstall_section_leaves_no_crd_and_uses_the_inventories(
    scratch: Server,
    workloads: list[Server],
    workload_clients: list[TestbedClient],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    release_file = release(tmp_path)
    kubeconfig = scratch.write_kubeconfig(
        tmp_path / "admin", user="cli-admin", groups=("system:masters",)
    )
    commands = section_commands("Uninstall")
    with TestbedClient(scratch) as mgmt:
        documents = apply_in_file_order(mgmt, release_file)
        with replica(scratch, documents, "crs-controller-0") as process:
            name = delete_set_applied(mgmt, workloads[1], workload_clients[1])
            capsys.readouterr()
            skipped = follow(commands, kubeconfig, release_file)
            out = capsys.readouterr().out
            assert skipped == [
                "kubectl delete extensionconfig crs-controller --ignore-not-found",
                f"kubectl delete -f {RELEASE_FILE}",
            ], skipped
            assert "would delete 1 ClusterResourceSet(s): team-a/addon" in out, out
            assert "release deleted" in out, process.log_tail()
        # The controller removed the set's object before the release went.
        assert workload_clients[1].get("v1", "ConfigMap", name, "default") is None
        for crd in (d for d in documents if d["kind"] == "CustomResourceDefinition"):
            wait_for(
                lambda n=crd["metadata"]["name"]: (
                    mgmt.get(CRD_API, "CustomResourceDefinition", n) is None
                ),
                TIMEOUT,
                message=f"CRD {crd['metadata']['name']} gone",
            )
        left = [_left(mgmt, d) for d in documents if d["kind"] != "CustomResourceDefinition"]
        assert [d for d in left if d] == [f"Namespace {SYSTEM_NAMESPACE} Terminating"]


def _left(mgmt: TestbedClient, document: Obj) -> str:
    meta = document["metadata"]
    live = mgmt.get(document["apiVersion"], document["kind"], meta["name"], meta.get("namespace"))
    if live is None:
        return ""
    state = "Terminating" if live["metadata"].get("deletionTimestamp") else "present"
    return f"{document['kind']} {meta['name']} {state}"


def holder(mgmt: TestbedClient) -> str | None:
    lease = mgmt.get(LEASE_API, "Lease", "crs-controller", SYSTEM_NAMESPACE)
    return (lease or {}).get("spec", {}).get("holderIdentity")


def replica(server: Server, documents: list[Obj], pod: str) -> ControllerProcess:
    """The release's Deployment as one pod named ``pod``, its own listening addresses
    aside (the test bed gives it free loopback ports), logging each reconcile."""
    (deployment,) = [d for d in documents if d["kind"] == "Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    own = [a for a in args[1:] if a.startswith("--leader-elect")]
    return ControllerProcess(server, *own, "--log-level", "debug", env={"POD_NAME": pod})


def test_the_upgrading_section_hands_over_without_a_write(
    scratch: Server,
    workloads: list[Server],
    workload_clients: list[TestbedClient],
    tmp_path: Path,
) -> None:
    release_file = release(tmp_path)
    assert section_commands("Upgrading the controller") == [f"kubectl apply -f {RELEASE_FILE}"]
    user = unique("upgrade-user")
    with TestbedClient(scratch) as mgmt:
        documents = apply_in_file_order(mgmt, release_file)
        with replica(scratch, documents, "old-0") as old:
            delete_set_applied(mgmt, workloads[1], workload_clients[1], user=user)
            with replica(scratch, documents, "new-0") as new:
                apply_in_file_order(mgmt, release_file)  # the section's one command
                assert holder(mgmt) == "old-0"  # the new pod stands by, Ready
                since = time.time()
                old.stop()
                wait_for(lambda: holder(mgmt) == "new-0", TIMEOUT, message="new-0 leads")
                key = f"{TEAM}/cluster-1"
                wait_for(lambda: reconciles(new, "cluster", key) > 0, TIMEOUT, message=key)
                audit_caught_up([scratch, workloads[1]])
                assert writes_by([workloads[1]], {user}, since) == []
                rewritten = [w for w in writes_by([scratch], {SA_USER}, since) if "bindings" in w]
                assert rewritten == []


WAY_OUT = "### When the controller is already gone"
CRS_KIND = "ClusterResourceSet"
CRDS = ("clusterresourcesetbindings.addons.crs.dev", "clusterresourcesets.addons.crs.dev")


def way_out_commands() -> list[str]:
    """The commands the "When the controller is already gone" subsection gives, in
    order: its inline code that runs ``crs-controller`` or ``kubectl``."""
    section = INSTALL_DOC.read_text().split(f"\n{WAY_OUT}\n", 1)[1].split("\n## ", 1)[0]
    spans = re.findall(r"`([^`]+)`", section.replace("\n", " "))
    return [s for s in spans if s.startswith(("crs-controller ", "kubectl "))]


def as_written(line: str, kubeconfig: Path, **words: str) -> str:
    """``line`` run by bash as a reader would paste it (the words NAME and NS filled
    in), against the server of ``kubeconfig``; its output."""
    for word, value in words.items():
        line = re.sub(rf"\b{word}\b", value, line)
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", line],
        capture_output=True,
        text=True,
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"{line}: {done.stderr}"
    return done.stdout


def second_delete_set(mgmt: TestbedClient, workload_client: TestbedClient) -> str:
    """Another Delete set on the cluster of ``delete_set_applied``; its object's name."""
    name = unique("docs-way-out")
    mgmt.create(source_configmap(TEAM, "addon-2", {"a": manifests(configmap_obj(name))}))
    crs = crs_obj(TEAM, "second", [("ConfigMap", "addon-2")], {"team": "a"}, mode="Reconcile")
    crs["spec"]["deletionPolicy"] = "Delete"
    mgmt.create(crs)
    wait_condition(mgmt, TEAM, "second", "Ready", "True", "Applied")
    wait_object(workload_client, "v1", "ConfigMap", name, "default")
    return name


def recorded(bindings_yaml: str, crs: str) -> list[str]:
    """``spec.bindings[].resources[].objects`` of set ``crs``'s entry, by name."""
    (binding,) = yaml.safe_load(bindings_yaml)["items"]
    return [
        o["name"]
        for entry in binding["spec"]["bindings"]
        if entry["clusterResourceSetName"] == crs
        for resource in entry["resources"]
        for o in resource["objects"]
    ]


@pytest.mark.skipif(
    not (shutil.which("kubectl") and shutil.which("jq")),
    reason="the section's commands are kubectl and jq lines: not both installed here",
)
def test_the_way_out_when_the_controller_is_gone_works_as_written(
    scratch: Server,
    workloads: list[Server],
    workload_clients: list[TestbedClient],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    force, patch, bindings, find = way_out_commands()
    assert force == "crs-controller uninstall -A --yes --force", force
    admin = {"user": "cli-admin", "groups": ("system:masters",)}
    kubeconfig = scratch.write_kubeconfig(tmp_path / "admin", **admin)
    on_workload = workloads[1].write_kubeconfig(tmp_path / "workload", **admin)
    wl = workload_clients[1]
    with TestbedClient(scratch) as mgmt:
        documents = apply_in_file_order(mgmt, release(tmp_path))
        with replica(scratch, documents, "crs-controller-0"):
            first = delete_set_applied(mgmt, workloads[1], wl)
            second = second_delete_set(mgmt, wl)
        # The controller is gone: a set deleted now stays Terminating on its finalizer.
        mgmt.delete(CRS_API, CRS_KIND, "addon", TEAM)
        assert mgmt.get(CRS_API, CRS_KIND, "addon", TEAM)["metadata"]["deletionTimestamp"]
        as_written(patch, kubeconfig, NAME="addon", NS=TEAM)
        assert mgmt.get(CRS_API, CRS_KIND, "addon", TEAM) is None
        capsys.readouterr()
        assert main([*shlex.split(force)[1:], "--kubeconfig", str(kubeconfig)]) == 0
        out = capsys.readouterr().out
        assert f"left behind by {TEAM}/second: 1 object(s)" in out, out
        wait_for(lambda: not mgmt.list(CRS_API, CRS_KIND), TIMEOUT, message="no set left")
        # Nothing was cleaned up; the inventory says what, where the section says.
        listed = as_written(bindings, kubeconfig, NS=TEAM)
        assert (recorded(listed, "addon"), recorded(listed, "second")) == ([first], [second])
        found = set(as_written(find, on_workload).split())
        assert {f"default/{first}", f"default/{second}"} <= found
        for name in (first, second):  # "Delete them there, then the bindings CRD."
            wl.delete("v1", "ConfigMap", name, "default")
        for crd in CRDS:
            mgmt.delete(CRD_API, "CustomResourceDefinition", crd)
        for crd in CRDS:  # neither stays Terminating
            wait_for(
                lambda n=crd: mgmt.get(CRD_API, "CustomResourceDefinition", n) is None,
                TIMEOUT,
                message=f"CRD {crd} gone",
            )

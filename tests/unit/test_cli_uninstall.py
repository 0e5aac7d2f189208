"""`crs-controller uninstall`'s pure parts: who holds the leader Lease (seen renewed,
left unchanged, released, malformed; on a fake clock), the decision (wait for the
holder, refuse without one, force), the order --delete-release deletes a release in
(the controller first, its rights next, the CRDs last and the bindings CRD last of
all), what a forced
removal leaves behind and how it is told; and the release file's own order
(hack/release.py): apply-valid, the bindings CRD after the ClusterResourceSet CRD.

--delete-release on an in-memory management cluster: it deletes the ExtensionConfig
registering the controller (named crs-controller, or labelled so under a name
prefix; calling a Service of the release's namespace) before the Deployment, and no
other; it deletes nothing while a ClusterResourceSet is left in any namespace, and
keeps the CRDs when one appears while the rest of the release goes.

The leader Lease is looked for with --controller-namespace, else in the namespace
the --delete-release file runs the controller in (prefixed or not), else crs-system;
a release running it in two namespaces is refused, asking which; a refusal for want
of a leader names --controller-namespace.

uninstall -n NAMESPACE says the release can be deleted only when no namespace has a
ClusterResourceSet left, else names the namespaces that have (exit 0 either way: the
namespace asked for is cleaned up).

uninstall deletes, in each namespace, the sets that depend on others first (removal
runs the other way); at its timeout it says of each set left why it may wait.

One tenant's large objects (a last-applied annotation of many commas) do not stop
either command for everyone: the sets, bindings and ExtensionConfigs are read page by
page, each page bounded on its own as a KubeClient bounds it, and only an object
alone over what one answer may decode stops the command (exit 2, its content never
told)."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import itertools
from pathlib import Path
from typing import Any

import pytest
import yaml

from crs_controller.app.cli import main
from crs_controller.app.commands.common import UsageError
from crs_controller.app.commands.release_deletion import (
    EXTENSION_API,
    delete_release,
    deletion_order,
)
from crs_controller.app.commands.uninstall import (
    LEASE_POLL,
    Force,
    Refuse,
    Wait,
    _Run,
    _sets,
    _timed_out,
    decide,
    describe_leftovers,
    kept,
    leader,
    leftovers,
    release_verdict,
)
from crs_controller.core.api.clusters import PAUSED_ANNOTATION
from crs_controller.core.api.models import API_VERSION, FINALIZER
from crs_controller.core.errors import APIError, CRSError
from crs_controller.core.spec.metadata import MAX_LABELS

from .fake_clock import FakeClock
from .memory_kube import CLUSTER_API, MemoryKube

ROOT = Path(__file__).resolve().parents[2]


def lease(holder: str, renewed: str, seconds: Any = 15) -> dict[str, Any]:
    return {
        "spec": {"holderIdentity": holder, "renewTime": renewed, "leaseDurationSeconds": seconds}
    }


RENEWED = "2026-01-01T11:59:50.000000Z"


async def judged(reads: list[dict[str, Any] | None]) -> tuple[str | None, float]:
    """Who ``leader`` names when the Lease reads as ``reads``, one a second, and how
    long that took on its own clock."""
    clock, left = FakeClock(), iter(reads)
    start = clock.now()

    async def read() -> dict[str, Any] | None:
        return next(left, reads[-1])

    judging = asyncio.create_task(leader(read, clock))
    while not judging.done():
        idling = asyncio.ensure_future(clock.until_asleep())
        await asyncio.wait({judging, idling}, return_when=asyncio.FIRST_COMPLETED)
        idling.cancel()
        if not judging.done():
            clock.advance(LEASE_POLL)
    return judging.result(), clock.now() - start


@pytest.mark.parametrize(
    ("reads", "holder", "took"),
    [
        # Renewed while watched: held, whatever its renewTime says of our clock.
        ([lease("pod-a", RENEWED), lease("pod-a", "2026-01-01T11:59:52Z")], "pod-a", 1),
        ([lease("pod-a", RENEWED), lease("pod-b", RENEWED)], "pod-b", 1),  # taken over
        ([lease("pod-a", RENEWED)], None, 15),  # unchanged for its duration: gone
        ([lease("pod-a", RENEWED, 5)], None, 5),  # its own duration counts
        ([lease("pod-a", RENEWED, "x")], None, 15),  # unreadable: ours
        ([lease("pod-a", RENEWED), None], None, 1),  # deleted meanwhile
        ([lease("", RENEWED, 1)], None, 0),  # released on a clean shutdown
        ([{"spec": {}}], None, 0),
        ([None], None, 0),
    ],
)
async def test_the_leader_is_a_holder_seen_renewing_the_lease(
    reads: list[dict[str, Any] | None], holder: str | None, took: float
) -> None:
    assert await judged(reads) == (holder, took)


def test_the_decision() -> None:
    assert decide("pod-a", force=False, lease="crs-system/crs-controller") == Wait("pod-a")
    assert decide("pod-a", force=True, lease="x") == Force()
    assert decide(None, force=True, lease="x") == Force()
    refused = decide(None, force=False, lease="crs-system/crs-controller")
    assert isinstance(refused, Refuse)
    assert "no controller holds the leader Lease crs-system/crs-controller" in refused.reason
    assert "addons.crs.dev/finalizer" in refused.reason


def doc(kind: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": kind, "metadata": {"name": name}}


RELEASE = [
    doc("Namespace", "crs-system"),
    doc("ExtensionConfig", "crs-controller"),
    doc("CustomResourceDefinition", "clusterresourcesetbindings.addons.crs.dev"),
    doc("CustomResourceDefinition", "clusterresourcesets.addons.crs.dev"),
    doc("ServiceAccount", "crs-controller"),
    doc("Role", "crs-controller-leader-election"),
    doc("ClusterRole", "crs-controller"),
    doc("RoleBinding", "crs-controller-leader-election"),
    doc("ClusterRoleBinding", "crs-controller"),
    doc("Deployment", "crs-controller"),
    doc("ValidatingAdmissionPolicy", "crs-controller-binding-writers"),
    doc("ValidatingAdmissionPolicyBinding", "crs-controller-binding-writers"),
    doc("ConfigMap", "something-else"),
]


def test_delete_release_stops_the_controller_first_and_deletes_the_bindings_crd_last() -> None:
    order = [(d["kind"], d["metadata"]["name"]) for d in deletion_order(RELEASE)]
    assert order == [
        ("ExtensionConfig", "crs-controller"),
        ("Deployment", "crs-controller"),
        ("ValidatingAdmissionPolicyBinding", "crs-controller-binding-writers"),
        ("ValidatingAdmissionPolicy", "crs-controller-binding-writers"),
        ("ClusterRoleBinding", "crs-controller"),
        ("RoleBinding", "crs-controller-leader-election"),
        ("ClusterRole", "crs-controller"),
        ("Role", "crs-controller-leader-election"),
        ("ServiceAccount", "crs-controller"),
        ("Namespace", "crs-system"),
        ("ConfigMap", "something-else"),
        ("CustomResourceDefinition", "clusterresourcesets.addons.crs.dev"),
        ("CustomResourceDefinition", "clusterresourcesetbindings.addons.crs.dev"),
    ]


def binding(namespace: str, cluster: str, entries: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "addons.crs.dev/v1alpha1",
        "kind": "ClusterResourceSetBinding",
        "metadata": {"name": cluster, "namespace": namespace},
        "spec": {"clusterName": cluster, "bindings": entries},
    }


def entry(crs: str, *names: str) -> dict[str, Any]:
    objects = [{"apiVersion": "v1", "kind": "ConfigMap", "namespace": "kube-system", "name": n}
               for n in names]  # fmt: skip
    resource = {"kind": "ConfigMap", "name": "addon", "objects": objects}
    return {"clusterResourceSetName": crs, "resources": [resource]}


def test_a_forced_removal_names_every_object_it_leaves_and_where_it_is_recorded() -> None:
    bindings = [
        binding("fleet", "prod-1", [entry("cni", "a", "b"), entry("other", "c")]),
        binding("other", "prod-2", [entry("cni", "d")]),  # another namespace's cni
        {"kind": "ClusterResourceSetBinding", "spec": "garbage"},
    ]
    found = leftovers(bindings, {("fleet", "cni")})
    assert [(f.crs, f.binding, f.objects) for f in found] == [
        ("fleet/cni", "fleet/prod-1",
         ("v1 ConfigMap kube-system/a", "v1 ConfigMap kube-system/b")),
    ]  # fmt: skip
    lines = describe_leftovers(found)
    assert lines[0].startswith("left behind by fleet/cni: 2 object(s) stay on the workload")
    assert "ClusterResourceSetBinding fleet/prod-1" in lines[0]
    assert lines[1:3] == ["  v1 ConfigMap kube-system/a", "  v1 ConfigMap kube-system/b"]
    assert "field manager crs-controller" in lines[3]
    assert describe_leftovers([]) == []


def _release() -> Any:
    spec = importlib.util.spec_from_file_location("release", ROOT / "hack" / "release.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_release_file_applies_in_order_and_has_the_bindings_crd_after_the_crs_crd() -> None:
    release = _release()
    _, _, documents = release.build(release.project_version())
    kinds = [d["kind"] for d in documents]
    names = [d["metadata"]["name"] for d in documents]
    # kubectl apply creates in file order: the Namespace and the CRDs before the rest.
    assert kinds[0] == "Namespace"
    last_crd = max(i for i, k in enumerate(kinds) if k == "CustomResourceDefinition")
    assert last_crd < kinds.index("ServiceAccount") < kinds.index("Deployment")
    # kubectl delete deletes in file order: the inventories' CRD after the sets' CRD.
    assert names.index("clusterresourcesets.addons.crs.dev") < names.index(
        "clusterresourcesetbindings.addons.crs.dev"
    )
    assert len(documents) == len(release.render(ROOT / "config" / "default"))


# --- --delete-release on a management cluster in memory ----------------------------------

SYSTEM = "crs-system"


def placed(kind: str, name: str, api_version: str = "v1", namespace: str | None = SYSTEM) -> Any:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": api_version, "kind": kind, "metadata": meta}


def extension_config(name: str, service_namespace: str, labels: dict[str, str]) -> Any:
    config = placed("ExtensionConfig", name, EXTENSION_API, None)
    config["metadata"]["labels"] = labels
    service = {"name": "crs-controller-extension", "namespace": service_namespace, "port": 443}
    config["spec"] = {"clientConfig": {"service": service}}
    return config


CRD_API = "apiextensions.k8s.io/v1"
INSTALLED = [
    placed("Namespace", SYSTEM, namespace=None),
    placed("CustomResourceDefinition", "clusterresourcesets.addons.crs.dev", CRD_API, None),
    placed("CustomResourceDefinition", "clusterresourcesetbindings.addons.crs.dev", CRD_API, None),
    placed("ServiceAccount", "crs-controller"),
    placed("Deployment", "crs-controller", "apps/v1"),
]
OURS = {"app.kubernetes.io/name": "crs-controller"}


async def installed(*extra: Any) -> MemoryKube:
    kube = MemoryKube("management")
    for obj in [*INSTALLED, *extra]:
        await kube.create(obj)
    kube.requests.clear()
    return kube


def a_set(namespace: str, name: str) -> Any:
    crs = placed("ClusterResourceSet", name, API_VERSION, namespace)
    crs["metadata"]["finalizers"] = [FINALIZER]
    return crs


def deleted(kube: MemoryKube) -> list[str]:
    return [what for verb, what in kube.requests if verb == "delete"]


async def test_delete_release_deletes_the_registered_extension_before_the_deployment() -> None:
    kube = await installed(
        extension_config("crs-controller", SYSTEM, {}),
        extension_config("platform-crs-controller", SYSTEM, OURS),  # a name prefix
        extension_config("other-provider", SYSTEM, {}),  # not ours
        extension_config("team-b-crs-controller", "team-b", OURS),  # another install's
    )
    said: list[str] = []
    await delete_release(kube, INSTALLED, said.append)
    assert deleted(kube)[:3] == [
        "ExtensionConfig/crs-controller",
        "ExtensionConfig/platform-crs-controller",
        "Deployment/crs-controller",
    ]
    left = sorted(name for (_, kind, _, name) in kube.objects if kind == "ExtensionConfig")
    assert left == ["other-provider", "team-b-crs-controller"]
    assert said[0] == "deleted: ExtensionConfig crs-controller"
    assert said[-1] == "release deleted"
    assert [k for (_, k, _, _) in kube.objects if k == "CustomResourceDefinition"] == []


async def test_delete_release_deletes_nothing_while_a_set_is_left_in_any_namespace() -> None:
    kube = await installed(extension_config("crs-controller", SYSTEM, {}), a_set("team-b", "cni"))
    with pytest.raises(UsageError) as refused:  # exit code 2, as every UsageError
        await delete_release(kube, INSTALLED, lambda line: None)
    message = str(refused.value)
    assert message.startswith("1 ClusterResourceSet(s) still exist: team-b/cni.")
    assert "nothing of the release was deleted" in message
    assert kube.writes() == []


async def test_a_refusal_names_ten_sets_and_counts_the_rest() -> None:
    kube = await installed(*(a_set("team-b", f"set-{n:02}") for n in range(25)))
    with pytest.raises(UsageError) as refused:
        await delete_release(kube, INSTALLED, lambda line: None)
    message = str(refused.value)
    assert message.startswith("25 ClusterResourceSet(s) still exist: team-b/set-00, ")
    assert "team-b/set-09 and 15 more." in message
    assert "set-10" not in message


async def test_the_crds_stay_when_a_set_appears_while_the_release_goes() -> None:
    kube = await installed()
    delete = kube.delete

    async def deleting(api_version: str, kind: str, name: str, *args: Any, **kw: Any) -> bool:
        if kind == "Deployment":  # the controller's last act: a set created meanwhile
            await kube.create(a_set("team-a", "late"))
        return await delete(api_version, kind, name, *args, **kw)

    kube.delete = deleting  # type: ignore[method-assign]
    with pytest.raises(UsageError) as refused:
        await delete_release(kube, INSTALLED, lambda line: None)
    assert "team-a/late" in str(refused.value)
    assert "the CRDs were kept" in str(refused.value)
    assert "Deployment/crs-controller" in deleted(kube)
    assert [d for d in deleted(kube) if d.startswith("CustomResourceDefinition/")] == []


def fresh_lease() -> Any:
    held = placed("Lease", "crs-controller", "coordination.k8s.io/v1")
    return {**held, **lease("pod-1", RENEWED)}


class Hurried(FakeClock):
    """A clock on which every wait ends at once, its time moved to the deadline."""

    async def sleep_until(self, deadline: float | None, wake: asyncio.Event) -> None:
        if deadline is not None and deadline > self.now():
            self.advance(deadline - self.now())


def renewing(kube: MemoryKube) -> None:
    """The leader Lease shows a new renewal each time it is read: a live controller."""
    get, reads = kube.get, itertools.count()

    async def renewed(api_version: str, kind: str, *args: Any, **kw: Any) -> Any:
        found = await get(api_version, kind, *args, **kw)
        if kind == "Lease" and found is not None:
            spec = {**found["spec"], "renewTime": f"2026-01-01T12:00:{next(reads) % 60:02d}Z"}
            found = {**found, "spec": spec}
        return found

    kube.get = renewed  # type: ignore[method-assign]


async def uninstalling(kube: MemoryKube, namespace: str | None, force: bool = False) -> list[str]:
    """What ``uninstall --yes`` (-n namespace, or -A for None) says; exit 0 asserted."""
    args = argparse.Namespace(
        controller_namespace=SYSTEM,
        force=force,
        yes=True,
        timeout=5.0,
        namespace=namespace,
        all_namespaces=namespace is None,
    )
    said: list[str] = []
    renewing(kube)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("crs_controller.app.commands.uninstall._out", said.append)
        work = _Run(kube, namespace, args, Hurried())  # type: ignore[arg-type]
        assert await _sets(work) == 0
    return said


async def test_a_namespace_without_sets_does_not_say_the_release_can_go_while_others_have() -> None:
    kube = await installed(fresh_lease(), a_set("other-tenant", "cni"))
    assert await uninstalling(kube, "fleet") == [
        "no ClusterResourceSets left in fleet",
        "1 ClusterResourceSet(s) are still in namespace(s) other-tenant: do not delete the "
        "release yet (uninstall -A deletes every namespace's)",
    ]


async def test_a_namespace_cleaned_up_names_the_namespaces_that_still_have_sets() -> None:
    kube = await installed(fresh_lease(), a_set("fleet", "cni"), a_set("team-b", "cni"))
    said = await uninstalling(kube, "fleet")
    assert said[-2:] == [
        "every ClusterResourceSet is cleaned up in fleet",
        "1 ClusterResourceSet(s) are still in namespace(s) team-b: do not delete the "
        "release yet (uninstall -A deletes every namespace's)",
    ]
    assert not any("can be deleted" in line for line in said)


@pytest.mark.parametrize("namespace", ["fleet", None])
async def test_the_release_can_be_deleted_once_no_namespace_has_a_set(
    namespace: str | None,
) -> None:
    kube = await installed(fresh_lease(), a_set("fleet", "cni"))
    said = await uninstalling(kube, namespace)
    assert said[-1].endswith("the release can be deleted now")


async def test_without_the_right_to_list_every_namespace_the_release_is_not_said_to_go() -> None:
    kube = await installed(fresh_lease())
    listing = kube.pages

    async def namespaced_only(api_version: str, kind: str, namespace: str | None = None) -> Any:
        if namespace is None:
            raise APIError("list: 403 Forbidden", status=403)
        async for page in listing(api_version, kind, namespace):
            yield page

    kube.pages = namespaced_only  # type: ignore[method-assign,assignment]
    said = await uninstalling(kube, "fleet")
    assert said[0] == "no ClusterResourceSets left in fleet"
    assert "cannot be listed (forbidden)" in said[1]
    assert not any("can be deleted now" in line for line in said)


def test_the_verdict_names_five_namespaces_and_counts_the_rest() -> None:
    crss = [a_set(f"team-{n}", name) for n in range(8) for name in ("a", "b")]
    said = release_verdict(crss)
    assert said.startswith("16 ClusterResourceSet(s) are still in namespace(s) team-0, team-1, ")
    assert "team-4 and 3 more: do not delete the release yet" in said


# What one answer may decode to here (MemoryKube.values): each large object below is
# under it, three of them together are over it, as a list() of every namespace is.
VALUES = 1_000


def annotated(obj: Any, commas: int) -> Any:
    """``obj`` with a last-applied annotation of ``commas`` commas (each a JSON value
    counted before decoding)."""
    note = {"kubectl.kubernetes.io/last-applied-configuration": "," * commas}
    obj["metadata"]["annotations"] = note
    return obj


def large_sets(namespace: str, count: int = 3, commas: int = 600) -> list[Any]:
    return [annotated(a_set(namespace, f"large-{n}"), commas) for n in range(count)]


async def test_a_tenants_large_sets_are_still_named_by_a_refused_release_deletion() -> None:
    kube = await installed(*large_sets("team-b"))
    kube.values = VALUES
    with pytest.raises(UsageError) as refused:
        await delete_release(kube, INSTALLED, lambda line: None)
    message = str(refused.value)
    assert message.startswith("3 ClusterResourceSet(s) still exist: team-b/large-0, ")
    assert ",," not in message
    assert kube.writes() == []


async def test_other_large_extension_configs_do_not_stop_the_release_deletion() -> None:
    others = [annotated(extension_config(f"other-{n}", SYSTEM, {}), 600) for n in range(3)]
    kube = await installed(extension_config("crs-controller", SYSTEM, {}), *others)
    kube.values = VALUES
    said: list[str] = []
    await delete_release(kube, INSTALLED, said.append)
    assert said[0] == "deleted: ExtensionConfig crs-controller"
    assert said[-1] == "release deleted"
    assert [d for d in deleted(kube) if d.startswith("ExtensionConfig/")] == [
        "ExtensionConfig/crs-controller"
    ]


async def test_one_object_over_what_an_answer_decodes_stops_the_deletion_unsaid() -> None:
    kube = await installed(*large_sets("team-b", count=1, commas=VALUES + 1))
    kube.values = VALUES
    with pytest.raises(CRSError) as refused:  # exit code 2, as every CRSError
        await delete_release(kube, INSTALLED, lambda line: None)
    assert f"more than {VALUES} JSON values in one answer" in str(refused.value)
    assert ",," not in str(refused.value)
    assert kube.writes() == []


@pytest.mark.parametrize("namespace", ["team-b", None])
async def test_a_tenants_large_sets_do_not_stop_uninstall(namespace: str | None) -> None:
    kube = await installed(fresh_lease(), *large_sets("team-b"))
    kube.values = VALUES
    said = await uninstalling(kube, namespace)
    assert said[0] == "deleted 3 ClusterResourceSet(s); pod-1 cleans up"
    assert said[-1].endswith("the release can be deleted now")
    assert not any(",," in line for line in said)


async def test_a_tenants_large_sets_are_counted_when_another_namespace_is_cleaned_up() -> None:
    kube = await installed(fresh_lease(), a_set("fleet", "cni"), *large_sets("team-b"))
    kube.values = VALUES
    said = await uninstalling(kube, "fleet")
    assert said[-1].startswith("3 ClusterResourceSet(s) are still in namespace(s) team-b:")


async def test_a_forced_removal_reads_large_bindings_page_by_page() -> None:
    ours = {**binding("fleet", "prod-1", [entry("cni", "a")]), "apiVersion": API_VERSION}
    theirs = [
        annotated({**binding("team-b", f"c{n}", [entry("x", "y")]), "apiVersion": API_VERSION}, 600)
        for n in range(3)
    ]
    kube = await installed(a_set("fleet", "cni"), ours, *theirs)
    kube.values = VALUES
    said = await uninstalling(kube, None, force=True)
    assert said[1].startswith("left behind by fleet/cni: 1 object(s) stay on the workload")
    assert said[2] == "  v1 ConfigMap kube-system/a"


# --- where the leader Lease is looked for ------------------------------------------------


def uninstall_command(
    kube: MemoryKube,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    *argv: str,
) -> tuple[int, str, str]:
    """``crs-controller uninstall argv`` against ``kube``, a Lease renewed at every read
    (no wait between reads): exit code, stdout, stderr."""
    renewing(kube)

    async def no_wait(clock: Any, seconds: float) -> None:
        pass

    monkeypatch.setattr("crs_controller.app.commands.uninstall.management", lambda _: kube)
    monkeypatch.setattr("crs_controller.app.commands.uninstall.sleep_for", no_wait)
    code = main(["uninstall", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_refusal_for_want_of_a_leader_names_controller_namespace(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    kube = asyncio.run(installed(a_set("fleet", "cni")))
    code, _, err = uninstall_command(kube, monkeypatch, capsys, "-A", "--yes")
    assert code == 2
    assert "no controller holds the leader Lease crs-system/crs-controller" in err
    assert "--controller-namespace" in err
    assert deleted(kube) == []


def moved_release(tmp_path: Path, *namespaces: str) -> str:
    """A release file running the controller (prefixed, labelled) in ``namespaces``."""
    documents = []
    for namespace in namespaces:
        deployment = placed("Deployment", "team-crs-controller", "apps/v1", namespace)
        deployment["metadata"]["labels"] = OURS
        documents += [placed("Namespace", namespace, namespace=None), deployment]
    path = tmp_path / "install.yaml"
    path.write_text(yaml.safe_dump_all(documents))
    return str(path)


def test_the_lease_is_looked_for_where_the_release_runs_the_controller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    moved = placed("Lease", "crs-controller", "coordination.k8s.io/v1", "addons")
    kube = asyncio.run(installed({**moved, **lease("pod-1", RENEWED)}, a_set("fleet", "cni")))
    release = moved_release(tmp_path, "addons")
    code, out, err = uninstall_command(kube, monkeypatch, capsys, "-A", "--delete-release", release)
    assert (code, err) == (0, "")
    assert "would delete 1 ClusterResourceSet(s): fleet/cni" in out
    # --controller-namespace, given, is the one looked in.
    args = ("-A", "--delete-release", release, "--controller-namespace", SYSTEM)
    code, _, err = uninstall_command(kube, monkeypatch, capsys, *args)
    assert code == 2 and "leader Lease crs-system/crs-controller" in err


def test_a_release_running_controllers_in_two_namespaces_asks_which(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    kube = asyncio.run(installed(fresh_lease(), a_set("fleet", "cni")))
    release = moved_release(tmp_path, "addons", "team-a")
    code, _, err = uninstall_command(kube, monkeypatch, capsys, "-A", "--delete-release", release)
    assert code == 2
    assert "2 namespaces (addons, team-a)" in err and "--controller-namespace" in err
    assert kube.requests == []


# --- the order of deletion, and why a set left waits -----------------------------------


def depending(namespace: str, name: str, *on: str) -> Any:
    crs = a_set(namespace, name)
    crs["spec"] = {"dependsOn": [{"name": n} for n in on]}
    return crs


async def test_uninstall_deletes_dependents_before_what_they_depend_on() -> None:
    kube = await installed(
        fresh_lease(),
        a_set("fleet", "cni"),
        depending("fleet", "csi", "cni"),
        depending("fleet", "storage", "csi"),
        a_set("team-b", "web"),
    )
    await uninstalling(kube, None)
    order = [what.split("/")[1] for what in deleted(kube) if what.startswith("ClusterResource")]
    assert order == ["web", "storage", "csi", "cni"]


async def test_a_timeout_says_why_each_set_left_waits() -> None:
    paused = a_set("fleet", "paused")
    paused["metadata"]["annotations"] = {PAUSED_ANNOTATION: ""}
    blocked = a_set("fleet", "refused")
    waits = "deletion waits: spec.deletionPolicy: must be Delete or Orphan"
    ready = {"type": "Ready", "status": "False", "reason": "InvalidSpec", "message": waits}
    blocked["status"] = {"conditions": [ready]}
    left = [
        kept(c) for c in (paused, blocked, a_set("fleet", "cni"), depending("fleet", "csi", "cni"))
    ]
    kube = await installed(fresh_lease())
    args = argparse.Namespace(controller_namespace=SYSTEM)
    said: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("crs_controller.app.commands.uninstall._out", said.append)
        await _timed_out(_Run(kube, "fleet", args, Hurried()), left)  # type: ignore[arg-type]
    assert said[1] == f"  fleet/paused: blocked: annotation {PAUSED_ANNOTATION} is set " + (
        "(nothing goes until it is removed)"
    )
    assert said[2] == f"  fleet/refused: blocked: {waits}"
    assert (
        said[3] == "  fleet/cni: waits for fleet/csi, which depend(s) on it, to be cleaned up first"
    )
    assert said[4] == "  fleet/csi: no status yet"


def bound(namespace: str, cluster: str, *crss: str) -> Any:
    binding = placed("ClusterResourceSetBinding", cluster, API_VERSION, namespace)
    entries = [{"clusterResourceSetName": name, "resources": []} for name in crss]
    binding["spec"] = {"clusterName": cluster, "bindings": entries}
    return binding


async def test_a_timeout_names_the_refused_clusters_whose_entries_stay() -> None:
    """A Cluster the controller refuses (its labels over the bound) is left alone but
    for the entries of sets being deleted: one still there at the timeout is said
    with why it may stay, naming the field, never a label."""
    refused = placed("Cluster", "big", CLUSTER_API, "fleet")
    refused["metadata"]["labels"] = {f"k{n}": "s3cr3t" for n in range(MAX_LABELS + 1)}
    kube = await installed(
        fresh_lease(),
        refused,
        placed("Cluster", "small", CLUSTER_API, "fleet"),
        bound("fleet", "big", "cni", "csi"),
        bound("fleet", "small", "cni"),
    )
    args = argparse.Namespace(controller_namespace=SYSTEM)
    said: list[str] = []
    left = [kept(a_set("fleet", "cni")), kept(a_set("fleet", "csi"))]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("crs_controller.app.commands.uninstall._out", said.append)
        await _timed_out(_Run(kube, "fleet", args, Hurried()), left)  # type: ignore[arg-type]
    why = (
        f": its Cluster is refused (metadata.labels: more than {MAX_LABELS} entries) and left "
        "alone but for the entries of sets being deleted: a paused set's stays, a Delete "
        "set's until its objects there are removed (the cluster out of reach, say)"
    )
    assert said[3:6] == [
        f"  fleet/cni still bound in ClusterResourceSetBinding fleet/big{why}",
        f"  fleet/csi still bound in ClusterResourceSetBinding fleet/big{why}",
        "  fleet/cni still bound in ClusterResourceSetBinding fleet/small",
    ]
    assert "s3cr3t" not in repr(said)
    read = [r for r in kube.requests if r[1].startswith("Cluster/")]
    assert read == [("list", "Cluster/fleet")]  # one LIST, not a GET per binding


async def test_a_timeout_reads_the_clusters_once_however_many_bindings_are_left() -> None:
    """The controller down, thousands of bindings keep entries: the timeout's report
    costs one LIST of the Clusters' metadata, not a round trip each past the deadline;
    a user who may not list them gets the entries without the refusals."""
    bindings = [bound("fleet", f"c{n}", "cni") for n in range(300)]
    kube = await installed(fresh_lease(), *bindings)
    args = argparse.Namespace(controller_namespace=SYSTEM)
    said: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("crs_controller.app.commands.uninstall._out", said.append)
        await _timed_out(_Run(kube, "fleet", args, Hurried()), [kept(a_set("fleet", "cni"))])
    assert sum("still bound in ClusterResourceSetBinding" in line for line in said) == 300
    assert [r for r in kube.requests if r[1].startswith("Cluster/")] == [("list", "Cluster/fleet")]

    real_pages = kube.pages

    async def forbidden(api_version: str, kind: str, *args: Any, **kw: Any) -> Any:
        if kind == "Cluster":
            raise APIError("LIST clusters: 403 Forbidden", status=403)
        async for page in real_pages(api_version, kind, *args, **kw):
            yield page

    kube.pages = forbidden  # type: ignore[method-assign]
    said.clear()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("crs_controller.app.commands.uninstall._out", said.append)
        await _timed_out(_Run(kube, "fleet", args, Hurried()), [kept(a_set("fleet", "cni"))])
    assert said[2] == "  fleet/cni still bound in ClusterResourceSetBinding fleet/c0"

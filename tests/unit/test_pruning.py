"""Pruning decisions for deletionPolicy Delete: which applied objects are stale (not
recorded any more and not wanted by any CRS's sources), in safe deletion order, what
stays recorded while a deletion is unfinished, and which live objects are provably
ours to delete (a binding's inventory is only a claim), also when recorded under an
apiVersion the server serves no more (the same object under a served version), and,
when asked, only the very objects of the uids given."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crs_controller.clients.api import Obj, ResourceInfo
from crs_controller.clients.kube import KubeClient
from crs_controller.core.api.models import CRSBinding, ObjectRef, ResourceBinding
from crs_controller.core.errors import APIError, NotFound
from crs_controller.core.state.prune_decisions import (
    inventory,
    keep_pending,
    provably_ours,
    refusal,
    scope_refusal,
    stale_objects,
    wanted_keys,
    without,
)
from crs_controller.engine.reconcile.workload.pruning import Deletion, delete_objects, prune

from .memory_kube import MemoryKube

NS = ObjectRef(api_version="v1", kind="Namespace", name="addon")
CRD = ObjectRef(
    api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition", name="ws.x.io"
)
CR = ObjectRef(api_version="x.io/v1", kind="Widget", namespace="addon", name="w")
CM = ObjectRef(api_version="v1", kind="ConfigMap", namespace="default", name="cm")


def entry(name: str, **resources: list[ObjectRef]) -> CRSBinding:
    return CRSBinding(
        cluster_resource_set_name=name,
        resources=[
            ResourceBinding(kind="ConfigMap", name=r, hash="xxh3:0", applied=True, objects=objs)
            for r, objs in resources.items()
        ],
    )


def names(refs: list) -> list[str]:
    return [r.name for r in refs]


def test_everything_unwanted_is_stale_in_reverse_apply_order() -> None:
    old = entry("a", res=[NS, CRD, CR, CM])
    assert names(stale_objects(old, set(), set())) == ["cm", "w", "ws.x.io", "addon"]


def test_recorded_objects_are_never_stale() -> None:
    old = entry("a", res=[NS, CM])
    keep = inventory([entry("b", other=[CM])])
    assert names(stale_objects(old, keep, set())) == ["addon"]


def test_objects_wanted_by_some_source_are_never_stale() -> None:
    # The manifest had no namespace; the object landed in "default".
    wanted = wanted_keys([{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}}])
    assert names(stale_objects(entry("a", res=[CM, NS]), set(), wanted)) == ["addon"]
    # Wanted under another version of the same group: the same object.
    crd_v1beta1 = {
        "apiVersion": "apiextensions.k8s.io/v1beta1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "ws.x.io"},
    }
    assert stale_objects(entry("a", res=[CRD]), set(), wanted_keys([crd_v1beta1])) == []


def test_a_namespace_elsewhere_does_not_protect_an_object() -> None:
    wanted = wanted_keys(
        [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "x"}}]
    )
    assert names(stale_objects(entry("a", res=[CM]), set(), wanted)) == ["cm"]


HPA_V2BETA2 = ObjectRef("autoscaling/v2beta2", "HorizontalPodAutoscaler", "kube-system", "x")
HPA_V2 = ObjectRef("autoscaling/v2", "HorizontalPodAutoscaler", "kube-system", "x")
ROLE = ObjectRef("rbac.authorization.k8s.io/v1", "ClusterRole", "", "x")
ROLE_IN_FOO = ObjectRef("rbac.authorization.k8s.io/v1", "ClusterRole", "foo", "x")
GADGET = ObjectRef("x.io/v1", "Gadget", "", "x")  # a custom kind recorded cluster-scoped
GADGET_IN_FOO = ObjectRef("x.io/v1", "Gadget", "foo", "x")
WIDGET_IN_BAR = ObjectRef("x.io/v1", "Widget", "bar", "w")


def manifest(ref: ObjectRef) -> dict[str, Any]:
    return {"apiVersion": ref.api_version, "kind": ref.kind, "metadata": configmap(ref)["metadata"]}


@pytest.mark.parametrize(
    ("applied", "others", "sources", "stale"),
    [
        # Another CRS records the same object under another version of its group
        # (and adds nothing to what is wanted: paused, or its source failed to load).
        (HPA_V2BETA2, [HPA_V2], [], []),
        (HPA_V2, [HPA_V2BETA2], [], []),
        # A manifest gives a cluster-scoped object a namespace (kustomize, helm): the
        # same object as the one recorded without one.
        (ROLE, [], [ROLE.model_copy(update={"namespace": "kube-system"})], []),
        (GADGET, [], [GADGET.model_copy(update={"namespace": "kube-system"})], []),
        # An entry names a cluster-scoped object with a namespace: deleting it would
        # delete the object another entry records.
        (ROLE_IN_FOO, [ROLE], [], []),
        (GADGET_IN_FOO, [GADGET], [], []),
        (ROLE_IN_FOO, [], [ROLE], []),
        # A built-in cluster-scoped kind, whatever namespace each side names.
        (ROLE_IN_FOO, [ROLE.model_copy(update={"namespace": "bar"})], [], []),
        # Namespaced kinds keep their namespaces apart.
        (CR, [WIDGET_IN_BAR], [], [CR]),
        (CR, [], [WIDGET_IN_BAR], [CR]),
        (CR, [CR.model_copy(update={"api_version": "x.io/v2"})], [], []),
        (ROLE, [ObjectRef("other.io/v1", "ClusterRole", "", "x")], [], [ROLE]),
    ],
)
def test_the_same_object_under_another_version_or_namespace_is_never_stale(
    applied: ObjectRef, others: list[ObjectRef], sources: list[ObjectRef], stale: list[ObjectRef]
) -> None:
    recorded = inventory([entry("b", other=others)])
    wanted = wanted_keys(manifest(ref) for ref in sources)
    assert stale_objects(entry("a", res=[applied]), recorded, wanted) == stale


GROUPS = ["", "apps", "x.io", "rbac.authorization.k8s.io"]
refs_st = st.builds(
    lambda group, version, kind, namespace, name: ObjectRef(
        f"{group}/{version}" if group else version, kind, namespace, name
    ),
    st.sampled_from(GROUPS),
    st.sampled_from(["v1", "v2", "v1beta1"]),
    st.sampled_from(["ConfigMap", "Widget", "ClusterRole", "Namespace"]),
    st.sampled_from(["", "default", "kube-system", "a"]),
    st.sampled_from(["x", "y"]),
)


@st.composite
def same_object(draw: st.DrawFn, ref: ObjectRef) -> ObjectRef:
    """Another reference to the object ``ref`` names, as an entry could record it: any
    version of its group; any namespace when ``ref`` records it cluster-scoped, and
    none (recorded cluster-scoped) whatever namespace ``ref`` names."""
    version = draw(st.sampled_from(["v1", "v2", "v1beta1"]))
    namespaces = ["", "default", "kube-system", "a"] if not ref.namespace else ["", ref.namespace]
    return ObjectRef(
        f"{ref.group}/{version}" if ref.group else version,
        ref.kind,
        draw(st.sampled_from(namespaces)),
        ref.name,
    )


@given(st.data(), st.lists(refs_st, min_size=1, max_size=8), st.lists(refs_st, max_size=8))
def test_an_object_another_entry_or_source_names_is_never_stale(
    data: st.DataObject, applied: list[ObjectRef], others: list[ObjectRef]
) -> None:
    target = data.draw(st.sampled_from(applied))
    other = data.draw(same_object(target))
    old = entry("a", res=applied)
    assert target not in stale_objects(old, inventory([entry("b", res=[*others, other])]), set())
    # The same object wanted by a source: a manifest without a namespace names "default"
    # unless the kind is cluster-scoped.
    if other.namespace or not target.namespace or target.namespace == "default":
        wanted = wanted_keys([manifest(other)]) | {o.key for o in others}
        assert target not in stale_objects(old, set(), wanted)


def test_keep_pending_remembers_old_resources_and_objects() -> None:
    old = entry("a", first=[NS, CM], gone=[CR])
    new = entry("a", first=[NS])
    merged = keep_pending(new, old)
    by_name = {r.name: r.objects for r in merged.resources}
    assert by_name == {"first": [NS, CM], "gone": [CR]}
    assert keep_pending(None, old) == old


MANAGER = "crs-controller"


def live(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "x", "managedFields": list(entries)}}


def managed(manager: str, operation: str = "Apply", **extra: Any) -> dict[str, Any]:
    return {"manager": manager, "operation": operation, "fieldsV1": {"f:data": {}}, **extra}


@pytest.mark.parametrize(
    ("obj", "why"),
    [
        (live(managed(MANAGER)), None),
        (live(managed("kubectl", "Update"), managed(MANAGER)), None),
        # Created by someone else: what a forged inventory entry points at.
        ({"metadata": {"name": "x"}}, "it has no managedFields"),
        (live(), "it has no managedFields"),
        (live(managed("kubectl-client-side-apply", "Update")), "crs-controller never applied it"),
        # Another server-side applier, or our name through an Update (kubectl edit
        # --field-manager crs-controller): neither is our Apply.
        (live(managed("flux", "Apply")), "crs-controller never applied it"),
        (live(managed(MANAGER, "Update")), "crs-controller never applied it"),
        # Our Apply on a subresource only (status) does not make the object ours.
        (live(managed(MANAGER, subresource="status")), "crs-controller never applied it"),
        # Malformed managedFields from an odd server: refused, never a crash.
        ({"metadata": {"managedFields": "x"}}, "it has no managedFields"),
        ({"metadata": {"managedFields": ["x", None]}}, "crs-controller never applied it"),
        ({"metadata": None}, "it has no managedFields"),
    ],
)
def test_only_objects_our_field_manager_applied_may_be_deleted(
    obj: dict[str, Any], why: str | None
) -> None:
    assert refusal(obj, MANAGER) == why
    assert provably_ours(obj, MANAGER) is (why is None)


def test_the_proof_is_for_the_configured_field_manager() -> None:
    obj = live(managed("ops-crs"))
    assert provably_ours(obj, "ops-crs")
    assert refusal(obj, MANAGER) == "crs-controller never applied it"


entries_st = st.lists(
    st.fixed_dictionaries(
        {
            "manager": st.sampled_from([MANAGER, "kubectl", "flux", ""]),
            "operation": st.sampled_from(["Apply", "Update"]),
        },
        optional={"subresource": st.sampled_from(["", "status", "scale"])},
    ),
    max_size=5,
)


@given(entries_st)
def test_ours_exactly_when_some_entry_is_our_apply_on_the_object(
    entries: list[dict[str, Any]],
) -> None:
    ours = any(
        e["manager"] == MANAGER and e["operation"] == "Apply" and not e.get("subresource")
        for e in entries
    )
    assert provably_ours(live(*entries), MANAGER) is ours


def test_without_drops_refused_objects_from_every_resource() -> None:
    old = entry("a", first=[NS, CM], second=[CR, CM])
    kept = without(old, [CM])
    assert {r.name: r.objects for r in kept.resources} == {"first": [NS], "second": [CR]}
    assert without(old, []) == old
    # A refused object left pending would be refused again on every retry.
    assert CM not in inventory([keep_pending(entry("a", first=[NS]), kept)])


async def test_prune_deletes_ours_and_refuses_a_forged_entry() -> None:
    kube = MemoryKube("w1")
    theirs = ObjectRef("apps/v1", "Deployment", "kube-system", "coredns")
    await kube.apply(configmap(CM), field_manager=MANAGER)
    await kube.apply(configmap(NS), field_manager=MANAGER)
    await kube.apply({**configmap(theirs), "kind": "Deployment"}, field_manager="kubeadm")
    # The tenant's binding claims the Deployment; the source now wants only NS.
    old = {"a": entry("a", res=[NS, CM, theirs])}
    new = {"a": entry("a", res=[NS])}
    client = cast(KubeClient, kube)
    pruned = await prune(client, old, new, {"a": "Delete"}, set(), field_manager=MANAGER)
    assert ("v1", "ConfigMap", "default", "cm") not in kube.objects
    assert ("apps/v1", "Deployment", "kube-system", "coredns") in kube.objects
    assert [verb for verb, _ in kube.requests if verb == "delete"] == ["delete"]
    assert "Deployment kube-system/coredns" in pruned.refused["a"]
    assert pruned.errors == {} and pruned.entries == new


async def test_a_refused_entry_is_not_kept_pending_when_another_delete_fails() -> None:
    kube = MemoryKube("w1")
    theirs = ObjectRef("v1", "ConfigMap", "team-b", "theirs")
    await kube.apply(configmap(theirs), field_manager="kubectl")
    await kube.apply(configmap(CM), field_manager=MANAGER)
    original = kube.delete

    async def failing(*args: Any, **kwargs: Any) -> bool:
        raise APIError("w1: forbidden", status=403)

    kube.delete = failing  # type: ignore[method-assign]
    old = {"a": entry("a", res=[CM, theirs])}
    client = cast(KubeClient, kube)
    pruned = await prune(client, old, {}, {"a": "Delete"}, set(), field_manager=MANAGER)
    kube.delete = original  # type: ignore[method-assign]
    assert pruned.errors["a"]
    # CM stays pending (its delete failed); the refused one is forgotten.
    assert inventory(pruned.entries.values()) == {CM}
    assert ("v1", "ConfigMap", "team-b", "theirs") in kube.objects


async def test_with_uids_only_the_very_objects_named_are_deleted() -> None:
    """Another object of the same name (deleted and made again meanwhile) is left
    alone, even one our field manager applied."""
    kube = MemoryKube("w1")
    other = ObjectRef("v1", "ConfigMap", "default", "other")
    mine = (await kube.apply(configmap(CM), field_manager=MANAGER))["metadata"]["uid"]
    await kube.apply(configmap(other), field_manager=MANAGER)
    client = cast(KubeClient, kube)
    done = await delete_objects(client, [CM, other], MANAGER, uids={mine, "gone"})
    assert (done.deleted, done.skipped, done.refused) == ([CM], [other], [])
    assert list(kube.objects) == [("v1", "ConfigMap", "default", "other")]


def configmap(ref: ObjectRef) -> dict[str, Any]:
    meta = {"name": ref.name, **({"namespace": ref.namespace} if ref.namespace else {})}
    return {"apiVersion": ref.api_version, "kind": ref.kind, "metadata": meta}


@pytest.mark.parametrize(
    ("refused", "shown", "tail"),
    [(1, 1, None), (3, 3, None), (5, 5, None), (6, 5, "and 1 more"), (40, 5, "and 35 more")],
)
def test_a_refusal_names_at_most_five_objects_and_counts_the_rest(
    refused: int, shown: int, tail: str | None
) -> None:
    refs = [
        ObjectRef(api_version="v1", kind="ConfigMap", namespace="ns", name=f"c{i}")
        for i in range(refused)
    ]
    text = Deletion(refused=[(ref, "never applied") for ref in refs]).refusals()
    assert sum(f"ns/c{i} " in text for i in range(refused)) == shown
    assert (tail in text) if tail else ("more" not in text)


# -- an inventory recorded under a version the server serves no more -------------------

PDB = ObjectRef("policy/v1beta1", "PodDisruptionBudget", "addon", "pdb")
WIDGET = ObjectRef("x.io/v1alpha2", "Widget", "addon", "w")
# Served versions per group (preferred first) and the kinds each serves: after an
# upgrade to Kubernetes 1.25 PodDisruptionBudgets are policy/v1 only; x.io's preferred
# version does not serve Widgets, its v1beta2 does; y.io is not served at all.
UPGRADED = {
    "policy": {"policy/v1": {"PodDisruptionBudget"}},
    "x.io": {"x.io/v1": {"Gadget"}, "x.io/v1beta2": {"Gadget", "Widget"}},
}


class UpgradedServer(MemoryKube):
    """Serves the kinds in ``UPGRADED`` and no others, answering as the client does for
    the rest: a GET finds nothing, a DELETE is NotFound. Counts the lookups of a
    group's versions and keeps the uid precondition of each delete."""

    def __init__(self, *discovered: str) -> None:
        super().__init__("w1")
        self.version_lookups = 0
        self.uids: list[str | None] = []
        # Versions the client discovered before the upgrade: still in its cache
        # (resource_info answers for them) until forgotten.
        self.discovered = set(discovered)

    def _serves(self, api_version: str, kind: str) -> bool:
        group = api_version.rpartition("/")[0]
        return kind in UPGRADED.get(group, {}).get(api_version, set())

    async def resource_info(self, api_version: str, kind: str) -> ResourceInfo:
        if not self._serves(api_version, kind) and api_version not in self.discovered:
            raise NotFound(f"w1: no kind {kind} in {api_version}", status=404)
        return await super().resource_info(api_version, kind)

    def forget_discovery(self, api_version: str) -> None:
        self.discovered.discard(api_version)

    async def served_versions(self, group: str) -> list[str]:
        self.version_lookups += 1
        return list(UPGRADED.get(group, {}))

    async def get(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> Obj | None:
        if not self._serves(api_version, kind):
            self._check("get", f"{kind}/{name}")
            return None
        return await super().get(api_version, kind, name, namespace)

    async def delete(
        self,
        api_version: str,
        kind: str,
        name: str,
        namespace: str | None = None,
        *,
        uid: str | None = None,
    ) -> bool:
        if not self._serves(api_version, kind):
            self._check("delete", f"{kind}/{name}")
            raise NotFound(f"w1: no kind {kind} in {api_version}", status=404)
        self.uids.append(uid)
        return await super().delete(api_version, kind, name, namespace, uid=uid)


async def served_as(kube: MemoryKube, ref: ObjectRef, api_version: str, manager: str) -> None:
    """``ref`` on the cluster as the server now serves it, applied by ``manager``."""
    await kube.apply({**configmap(ref), "apiVersion": api_version}, field_manager=manager)


async def test_ours_recorded_under_an_unserved_version_is_deleted_as_served() -> None:
    kube = UpgradedServer()
    pdbs = [PDB, PDB.model_copy(update={"name": "pdb2"})]
    for pdb in pdbs:
        await served_as(kube, pdb, "policy/v1", MANAGER)
    await served_as(kube, WIDGET, "x.io/v1beta2", MANAGER)
    old = {"a": entry("a", res=[*pdbs, WIDGET])}
    client = cast(KubeClient, kube)
    pruned = await prune(client, old, {}, {"a": "Delete"}, set(), field_manager=MANAGER)
    assert kube.objects == {}
    assert sorted(names(pruned.deleted["a"])) == ["pdb", "pdb2", "w"]
    assert pruned.errors == {} and pruned.refused == {}
    # The same proof as any delete: a uid precondition on the very object read.
    assert len(kube.uids) == 3 and None not in kube.uids
    # One lookup of the versions per group, not one per object.
    assert kube.version_lookups == 2


async def test_a_version_served_when_discovered_but_no_more_is_looked_up_again() -> None:
    # The client discovered policy/v1beta1 before the cluster's upgrade to 1.25.
    kube = UpgradedServer("policy/v1beta1")
    await served_as(kube, PDB, "policy/v1", MANAGER)
    old = {"a": entry("a", res=[PDB])}
    client = cast(KubeClient, kube)
    pruned = await prune(client, old, {}, {"a": "Delete"}, set(), field_manager=MANAGER)
    assert kube.objects == {} and pruned.deleted == {"a": [PDB]}
    assert pruned.errors == {} and pruned.refused == {}


async def test_theirs_recorded_under_an_unserved_version_is_refused() -> None:
    kube = UpgradedServer()
    await served_as(kube, PDB, "policy/v1", "kubectl")
    old = {"a": entry("a", res=[PDB])}
    client = cast(KubeClient, kube)
    pruned = await prune(client, old, {}, {"a": "Delete"}, set(), field_manager=MANAGER)
    assert ("policy/v1", "PodDisruptionBudget", "addon", "pdb") in kube.objects
    assert "PodDisruptionBudget addon/pdb (crs-controller never applied it)" in pruned.refused["a"]
    assert "a" not in pruned.deleted and pruned.errors == {}
    assert not [verb for verb, _ in kube.requests if verb == "delete"]


async def test_only_a_kind_its_group_serves_in_no_version_is_gone() -> None:
    kube = UpgradedServer()
    await served_as(kube, PDB, "policy/v1", MANAGER)
    group_gone = ObjectRef("y.io/v1", "Gadget", "addon", "g")
    kind_gone = ObjectRef("x.io/v1alpha1", "Sprocket", "addon", "s")
    old = {"a": entry("a", res=[group_gone, kind_gone, PDB])}
    client = cast(KubeClient, kube)
    pruned = await prune(client, old, {}, {"a": "Delete"}, set(), field_manager=MANAGER)
    # Nothing left of the gone kinds: nothing deleted, refused, failed or kept pending.
    assert pruned.deleted == {"a": [PDB]} and kube.objects == {}
    assert pruned.errors == {} and pruned.refused == {} and pruned.entries == {}
    assert [what for verb, what in kube.requests if verb == "delete"] == ["PodDisruptionBudget/pdb"]


# -- a ref whose namespace the kind's served scope contradicts -------------------------

GIZMO = ObjectRef("x.io/v1", "Gizmo", "", "g")  # a custom kind served cluster-scoped


@pytest.mark.parametrize(
    ("namespace", "namespaced", "why"),
    [
        ("", False, None),
        ("addon", True, None),
        ("kube-system", False, "namespace set on a cluster-scoped kind"),
        ("", True, "no namespace on a namespaced kind"),
    ],
)
def test_a_refs_namespace_must_fit_its_kinds_scope(
    namespace: str, namespaced: bool, why: str | None
) -> None:
    assert scope_refusal(GIZMO.model_copy(update={"namespace": namespace}), namespaced) == why


def scoped_server() -> MemoryKube:
    kube = MemoryKube("w1")
    kube.cluster_scoped.add("Gizmo")
    return kube


def touched(kube: MemoryKube, what: str) -> list[str]:
    return [verb for verb, target in kube.requests if target == what]


async def test_a_namespace_on_a_cluster_scoped_custom_kind_deletes_nothing() -> None:
    """CRS b applied the cluster-scoped Gizmo g and still wants it; a's entry names it
    in kube-system. The controller never applied a Gizmo there: nothing is read or
    deleted for that entry, and the refusal names the field."""
    kube = scoped_server()
    await kube.apply(configmap(GIZMO), field_manager=MANAGER)
    await kube.apply(configmap(CM), field_manager=MANAGER)
    forged = GIZMO.model_copy(update={"namespace": "kube-system"})
    old = {"a": entry("a", res=[forged, CM])}
    wanted = wanted_keys([manifest(GIZMO)])
    client = cast(KubeClient, kube)
    pruned = await prune(client, old, {}, {"a": "Delete"}, wanted, field_manager=MANAGER)
    assert ("x.io/v1", "Gizmo", "", "g") in kube.objects
    assert touched(kube, "Gizmo/g") == ["apply"]
    assert pruned.deleted == {"a": [CM]} and pruned.errors == {}
    reason = "Gizmo kube-system/g (namespace set on a cluster-scoped kind)"
    assert reason in pruned.refused["a"]
    assert pruned.entries == {}  # refused: reported once, not tried again


async def test_a_ref_contradicting_its_kinds_scope_is_refused_and_the_rest_deleted() -> None:
    kube = scoped_server()
    widget = ObjectRef("x.io/v1", "Widget", "addon", "w")
    for ref in (GIZMO, widget, CM):
        await kube.apply(configmap(ref), field_manager=MANAGER)
    no_namespace = widget.model_copy(update={"namespace": ""})
    with_namespace = GIZMO.model_copy(update={"namespace": "addon"})
    client = cast(KubeClient, kube)
    done = await delete_objects(client, [no_namespace, with_namespace, CM], MANAGER)
    assert done.deleted == [CM] and done.failed == [] and done.skipped == []
    assert done.refused == [
        (no_namespace, "no namespace on a namespaced kind"),
        (with_namespace, "namespace set on a cluster-scoped kind"),
    ]
    assert set(kube.objects) == {
        ("x.io/v1", "Gizmo", "", "g"),
        ("x.io/v1", "Widget", "addon", "w"),
    }
    assert touched(kube, "Gizmo/g") == touched(kube, "Widget/w") == ["apply"]


class StaleScope(MemoryKube):
    """Gizmos are served cluster-scoped; the client discovered them when their CRD
    was namespaced, and answers so until discovery is forgotten."""

    def __init__(self) -> None:
        super().__init__("w1")
        self.cluster_scoped.add("Gizmo")
        self.stale = True

    async def resource_info(self, api_version: str, kind: str) -> ResourceInfo:
        info = await super().resource_info(api_version, kind)
        return replace(info, namespaced=True) if self.stale and kind == "Gizmo" else info

    def forget_discovery(self, api_version: str) -> None:
        self.stale = False


async def test_a_scope_discovered_before_the_kind_changed_is_looked_up_again() -> None:
    kube = StaleScope()
    await kube.apply(configmap(GIZMO), field_manager=MANAGER)
    done = await delete_objects(cast(KubeClient, kube), [GIZMO], MANAGER)
    assert (done.deleted, done.refused) == ([GIZMO], []) and kube.objects == {}

"""``history`` and ``rollback`` over a CRS as the API server would hand it over (the
client replaced): ``history -o yaml`` prints status.history with the revision rolled
out marked, and ``rollback`` refuses a CRS not in mode Reconcile, writing nothing.

Over an in-memory management cluster holding the CRS and its snapshots: ``rollback``
writes its request only for a revision whose snapshot the controller would use
(the reviewer's case: a resource added since the last completed revision; a Secret
half missing; a foreign ConfigMap under the snapshot's name are exit 2, nothing
written), and its default target skips a newer completed revision it would refuse
for an older usable one, saying so."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Sequence
from typing import Any

import pytest
import yaml

from crs_controller.app.cli import main
from crs_controller.app.commands import history, rollback
from crs_controller.core.api.models import API_VERSION
from crs_controller.core.manifests.hashing import resource_hash
from crs_controller.core.rollout.history import ROLLBACK_ANNOTATION
from crs_controller.core.rollout.plan import revision
from crs_controller.core.rollout.snapshots import build, snapshot_name
from crs_controller.core.spec.objects import CRS, parse_crs

from .memory_kube import MemoryKube

OLD, NOW = "xxh3:00000000000000aa", "xxh3:00000000000000bb"
HISTORY = [
    {"revision": OLD, "firstSeen": "2026-11-28T10:00:00Z", "outcome": "Complete"},
    {"revision": NOW, "firstSeen": "2026-11-28T11:00:00Z", "outcome": "Complete"},
]


def crs_of(mode: str) -> CRS:
    return parse_crs(
        {
            "apiVersion": API_VERSION,
            "kind": "ClusterResourceSet",
            "metadata": {"name": "cni", "namespace": "fleet", "uid": "u1"},
            "spec": {
                "clusterSelector": {"matchLabels": {"env": "prod"}},
                "resources": [{"kind": "ConfigMap", "name": "cni"}],
                "mode": mode,
            },
            "status": {"revision": NOW, "history": HISTORY},
        }
    )


class Client:
    """The management cluster's client, refusing every request: nothing is written."""

    async def get(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"unexpected read {args}")

    async def close(self) -> None:
        pass


def served(monkeypatch: pytest.MonkeyPatch, module: Any, crs: CRS) -> None:
    async def get_crs(client: Any, namespace: str, name: str) -> CRS:
        assert (namespace, name) == ("fleet", "cni")
        return crs

    monkeypatch.setattr(module, "management", lambda args: Client())
    monkeypatch.setattr(module, "get_crs", get_crs)


def test_history_as_yaml_lists_the_revisions_and_marks_the_one_rolled_out(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    served(monkeypatch, history, crs_of("Reconcile"))
    assert main(["history", "cni", "-n", "fleet", "-o", "yaml"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown == [HISTORY[0], {**HISTORY[1], "now": "rolledOut"}]


def test_rollback_refuses_a_crs_not_in_mode_reconcile(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    served(monkeypatch, rollback, crs_of("ApplyOnce"))
    assert main(["rollback", "cni", "-n", "fleet"]) == 2
    said = capsys.readouterr()
    assert "ClusterResourceSet fleet/cni: a rollback needs mode: Reconcile" in said.err
    assert said.out == ""


# -- rollback over an in-memory management cluster with snapshots ----------------------

Key = tuple[str, str]
UID = "u1"


def source(kind: str, name: str, value: str) -> dict[str, Any]:
    """A source as the API server hands it over (a Secret's data base64)."""
    meta = {"name": name, "namespace": "fleet"}
    if kind == "Secret":
        data = {"v.yaml": base64.b64encode(value.encode()).decode()}
        resource_set = "addons.cluster.x-k8s.io/resource-set"
        return {
            "apiVersion": "v1",
            "kind": kind,
            "metadata": meta,
            "type": resource_set,
            "data": data,
        }
    return {"apiVersion": "v1", "kind": kind, "metadata": meta, "data": {"v.yaml": value}}


def revision_of(sources: dict[Key, dict[str, Any]]) -> str:
    return revision([(kind, name, resource_hash(raw)) for (kind, name), raw in sources.items()])


def snapshot(sources: dict[Key, dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """A revision of ``sources`` (spec order) and its snapshot, as the controller writes them."""
    rev = revision_of(sources)
    return rev, build("fleet", ("cni", UID), rev, list(sources), sources)


def cm(name: str, value: str = "x: 1") -> dict[Key, dict[str, Any]]:
    return {("ConfigMap", name): source("ConfigMap", name, f"kind: ConfigMap\n# {value}")}


def secret(name: str, value: str = "x: 1") -> dict[Key, dict[str, Any]]:
    return {("Secret", name): source("Secret", name, f"kind: Secret\n# {value}")}


def management_with(
    resources: Sequence[Key], history: list[tuple[str, str]], *objects: dict[str, Any]
) -> MemoryKube:
    """The CRS naming ``resources`` now, its status on the last revision of ``history``
    ((revision, outcome), oldest first), and ``objects`` (snapshots and others)."""
    kube = MemoryKube("management")
    asyncio.run(_hold(kube, resources, history, objects))
    return kube


async def _hold(
    kube: MemoryKube,
    resources: Sequence[Key],
    history: list[tuple[str, str]],
    objects: Sequence[dict[str, Any]],
) -> None:
    records = [
        {"revision": rev, "firstSeen": f"2026-11-28T1{i}:00:00Z", "outcome": outcome}
        for i, (rev, outcome) in enumerate(history)
    ]
    await kube.create(
        {
            "apiVersion": API_VERSION,
            "kind": "ClusterResourceSet",
            "metadata": {"name": "cni", "namespace": "fleet", "uid": UID},
            "spec": {
                "clusterSelector": {"matchLabels": {"env": "prod"}},
                "resources": [{"kind": kind, "name": name} for kind, name in resources],
                "mode": "Reconcile",
            },
            "status": {"revision": history[-1][0], "history": records},
        }
    )
    for obj in objects:
        await kube.create(obj)


def run_rollback(monkeypatch: pytest.MonkeyPatch, kube: MemoryKube, *extra: str) -> int:
    kube.requests.clear()
    monkeypatch.setattr(rollback, "management", lambda args: kube)
    return main(["rollback", "cni", "-n", "fleet", *extra])


def requested(kube: MemoryKube) -> str | None:
    crs = kube.objects[(API_VERSION, "ClusterResourceSet", "fleet", "cni")]
    return (crs["metadata"].get("annotations") or {}).get(ROLLBACK_ANNOTATION)


WITH_A_SECRET = [("ConfigMap", "a"), ("Secret", "s")]


def with_a_secret() -> list[tuple[str, list[dict[str, Any]]]]:
    """Two revisions of ``WITH_A_SECRET``, oldest first, and their snapshots."""
    return [snapshot(cm("a", value) | secret("s", value)) for value in ("1", "2")]


def refused_with(said: Any, kube: MemoryKube, why: str) -> None:
    """Exit 2 was answered with ``why`` on stderr, and nothing was written."""
    assert why in said.err
    assert said.out == "" and kube.writes() == [] and requested(kube) is None


def test_the_last_completed_revision_lacking_a_resource_added_since_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """On R1 with [a], complete; b added, R2 halts. ``rollback`` (the default, R1) and
    ``--to-revision R1``: R1's snapshot names [a], spec.resources [a, b], which the
    controller refuses (and would hold the fleet on): exit 2, nothing written."""
    r1, snap1 = snapshot(cm("a"))
    r2, snap2 = snapshot(cm("a") | cm("b"))
    resources = [("ConfigMap", "a"), ("ConfigMap", "b")]
    kube = management_with(resources, [(r1, "Complete"), (r2, "Halted")], *snap1, *snap2)
    why = f"the snapshot ConfigMap of revision {r1} names other resources than spec.resources"

    assert run_rollback(monkeypatch, kube) == 2
    said = capsys.readouterr()
    refused_with(said, kube, why)
    assert "no earlier revision with a usable snapshot completed its rollout" in said.err

    assert run_rollback(monkeypatch, kube, "--to-revision", r1) == 2
    refused_with(capsys.readouterr(), kube, why)


def test_a_snapshot_whose_secret_half_is_missing_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CRS names a Secret: R1's snapshot ConfigMap is there, its Secret is not."""
    (r1, snap1), (r2, snap2) = with_a_secret()
    assert [o["kind"] for o in snap1] == ["ConfigMap", "Secret"]
    kube = management_with(WITH_A_SECRET, [(r1, "Complete"), (r2, "Complete")], snap1[0], *snap2)

    assert run_rollback(monkeypatch, kube, "--to-revision", r1) == 2
    said = capsys.readouterr()
    refused_with(said, kube, f"the snapshot Secret of revision {r1} is missing")
    assert "# 1" not in said.err


def test_a_foreign_configmap_under_the_snapshots_name_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ConfigMap named as R1's snapshot but not this CRS's (no label, no owner)."""
    r1, snap1 = snapshot(cm("a"))
    r2, snap2 = snapshot(cm("a", "2"))
    foreign = {**snap1[0], "metadata": {"name": snapshot_name("cni", r1), "namespace": "fleet"}}
    kube = management_with(
        [("ConfigMap", "a")], [(r1, "Complete"), (r2, "Complete")], foreign, *snap2
    )

    assert run_rollback(monkeypatch, kube) == 2
    why = f"the snapshot ConfigMap of revision {r1} is not this ClusterResourceSet's"
    refused_with(capsys.readouterr(), kube, why)


def test_a_usable_snapshot_is_rolled_back_to(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Secret half and all, this CRS's, naming spec.resources: the request is written."""
    (r1, snap1), (r2, snap2) = with_a_secret()
    kube = management_with(WITH_A_SECRET, [(r1, "Complete"), (r2, "Halted")], *snap1, *snap2)

    assert run_rollback(monkeypatch, kube) == 0
    said = capsys.readouterr()
    assert said.out == f"ClusterResourceSet fleet/cni: rolling back from revision {r2} to {r1}\n"
    assert requested(kube) == f"{r2}/{r1}"
    assert kube.writes() == [("patch", "ClusterResourceSet/cni")]


def test_the_default_skips_a_newer_completed_revision_it_would_refuse(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """R0 [a, b] complete; R1 [a] complete (b removed); b added back, R2 halts: the
    default skips R1 (its snapshot names [a]) and goes to R0, saying why."""
    r0, snap0 = snapshot(cm("a", "0") | cm("b"))
    r1, snap1 = snapshot(cm("a"))
    r2, snap2 = snapshot(cm("a", "2") | cm("b"))
    resources = [("ConfigMap", "a"), ("ConfigMap", "b")]
    history_ = [(r0, "Complete"), (r1, "Complete"), (r2, "Halted")]
    kube = management_with(resources, history_, *snap0, *snap1, *snap2)

    assert run_rollback(monkeypatch, kube) == 0
    said = capsys.readouterr().out
    assert said.startswith(f"ClusterResourceSet fleet/cni: rolling back from revision {r2} to {r0}")
    assert (
        f"skipped, the controller would refuse them: the snapshot ConfigMap of revision {r1}"
        in said
    )
    assert requested(kube) == f"{r2}/{r0}"

"""A real Cluster API upgrade, gated by crs-controller, end to end.

Cluster API's core manager (built from its Go module, feature gates ClusterTopology
and RuntimeSDK on) runs against the test bed's management server with its CRDs
(hack/bench/capi.py installs them); crs-controller runs beside it with its Runtime
Extension, registered by an ExtensionConfig that names it by URL with its CA in
``caBundle``. A ClusterClass of stand-in kinds (this script plays their providers by
writing their status) backs one topology Cluster whose kubeconfig Secret points at a
real workload API server. A CRS with ``gateUpgrades`` holds two builds of an add-on:
one for 1.33, one for 1.34 whose Deployment only becomes Ready when this script, as
the workload's kubelet, says so (``--addon-ready-after``).

Then ``spec.topology.version`` goes from ``--from`` to ``--to`` and the script times:
Cluster API asking the control plane for the new version, the provider reporting it,
Cluster API calling AfterControlPlaneUpgrade (held while the 1.34 build is not Ready),
the hold released, BeforeWorkersUpgrade, the workers (a MachineDeployment of 0
replicas) taking the new version, and the topology reconciled. Figures and evidence
(hook calls and answers from crs-controller's log, Cluster API's log lines about the
hooks, the Cluster's pending-hooks annotation and TopologyReconciled condition as
they changed) are printed as JSON. Not part of the test run::

    .venv/bin/python hack/bench/upgrade_gate.py --capi-manager ~/.cache/capi/manager \\
        --capi-crds /tmp/capi-src/core/config/crd/bases
"""

from __future__ import annotations

import argparse
import base64
import copy
import json
import shutil
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from capi import CapiManager, install_stripped
from common import REPO, Figures, Sampler, warm_up

from crs_controller.testbed import ControlPlane, TestbedClient, wait_for
from crs_controller.testbed.clusters import CRD_API, V1BETA2, install_crds, kubeconfig_secret
from crs_controller.testbed.controller import ControllerProcess, install_rbac

NS = "upgrade-gate"
CLUSTER = "gated"
CRS_API = "addons.crs.dev/v1alpha1"
CP_API = "controlplane.cluster.x-k8s.io/v1beta2"
INFRA_API = "infrastructure.cluster.x-k8s.io/v1beta2"
BOOTSTRAP_API = "bootstrap.cluster.x-k8s.io/v1beta2"
RUNTIME_API = "runtime.cluster.x-k8s.io/v1beta2"
CONTRACT_LABEL = "cluster.x-k8s.io/v1beta2"  # the CRD label Cluster API reads the contract from
PENDING_HOOKS = "runtime.cluster.x-k8s.io/pending-hooks"
UPGRADE_STEP = "topology.internal.cluster.x-k8s.io/upgrade-step"
ADDON_NS = "kube-system"
HOOKS = ("AfterControlPlaneUpgrade", "BeforeWorkersUpgrade", "BeforeClusterDelete")
# Cluster API's own log lines about the upgrade hooks (at its default verbosity).
CAPI_HOOK_LINES = ("blocked by", "unblocked", "upgraded from version", "Failed to call extension")


# --- stand-in providers' CRDs -----------------------------------------------------


def _standin_crd(group: str, kind: str) -> dict[str, Any]:
    """A namespaced kind of a provider group with a loose schema and the contract
    label: Cluster API reads the fields its contract names and nothing else."""
    plural = kind.lower() + "s"
    loose = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return {
        "apiVersion": CRD_API,
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}", "labels": {CONTRACT_LABEL: "v1beta2"}},
        "spec": {
            "group": group,
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1beta2",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {"spec": loose, "status": loose},
                        }
                    },
                }
            ],
        },
    }


def standin_crds() -> list[dict[str, Any]]:
    """The project's stand-in KubeadmControlPlane (config/testing) with the contract
    label, and the templates, infrastructure and bootstrap kinds a ClusterClass with
    one MachineDeployment class refers to."""
    path = REPO / "config" / "testing" / "controlplane.cluster.x-k8s.io_kubeadmcontrolplanes.yaml"
    kcp = yaml.safe_load(path.read_text())
    kcp["metadata"].setdefault("labels", {})[CONTRACT_LABEL] = "v1beta2"
    return [
        kcp,
        _standin_crd("controlplane.cluster.x-k8s.io", "KubeadmControlPlaneTemplate"),
        _standin_crd("infrastructure.cluster.x-k8s.io", "StandinCluster"),
        _standin_crd("infrastructure.cluster.x-k8s.io", "StandinClusterTemplate"),
        _standin_crd("infrastructure.cluster.x-k8s.io", "StandinMachineTemplate"),
        _standin_crd("bootstrap.cluster.x-k8s.io", "StandinConfigTemplate"),
        # No Machine is ever made (0 replicas), but the MachineSet controller lists the
        # machine kinds of its templates to clean up orphans.
        _standin_crd("infrastructure.cluster.x-k8s.io", "StandinMachine"),
        _standin_crd("bootstrap.cluster.x-k8s.io", "StandinConfig"),
    ]


def install(mgmt: TestbedClient, capi_crds: Path, tmp: Path) -> None:
    """crs-controller's CRDs and RBAC, Cluster API's CRDs, the stand-ins."""
    ours = sorted((REPO / "config" / "crd" / "bases").glob("*.yaml"))
    standins = tmp / "standins.yaml"
    standins.write_text(yaml.safe_dump_all(standin_crds()))
    install_crds(mgmt, [*ours, standins], timeout=60)
    warm_up(mgmt, [*ours, standins])
    install_stripped(mgmt, capi_crds)
    install_rbac(mgmt)


# --- the objects ----------------------------------------------------------------


def _template(api: str, kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": api,
        "kind": kind,
        "metadata": {"name": name, "namespace": NS},
        "spec": {"template": {"spec": spec}},
    }


def _ref(api: str, kind: str, name: str) -> dict[str, str]:
    return {"apiVersion": api, "kind": kind, "name": name}


def cluster_class() -> list[dict[str, Any]]:
    return [
        _template(INFRA_API, "StandinClusterTemplate", "standin", {}),
        _template(CP_API, "KubeadmControlPlaneTemplate", "standin", {}),
        _template(INFRA_API, "StandinMachineTemplate", "standin-worker", {}),
        _template(BOOTSTRAP_API, "StandinConfigTemplate", "standin-worker", {}),
        {
            "apiVersion": V1BETA2,
            "kind": "ClusterClass",
            "metadata": {"name": "standin", "namespace": NS},
            "spec": {
                "infrastructure": {
                    "templateRef": _ref(INFRA_API, "StandinClusterTemplate", "standin")
                },
                "controlPlane": {
                    "templateRef": _ref(CP_API, "KubeadmControlPlaneTemplate", "standin")
                },
                "workers": {
                    "machineDeployments": [
                        {
                            "class": "worker",
                            # What Cluster API's MachineDeployment webhook would default.
                            "rollout": {
                                "strategy": {
                                    "type": "RollingUpdate",
                                    "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
                                }
                            },
                            "bootstrap": {
                                "templateRef": _ref(
                                    BOOTSTRAP_API, "StandinConfigTemplate", "standin-worker"
                                )
                            },
                            "infrastructure": {
                                "templateRef": _ref(
                                    INFRA_API, "StandinMachineTemplate", "standin-worker"
                                )
                            },
                        }
                    ]
                },
            },
        },
    ]


def _manifest(*docs: dict[str, Any]) -> str:
    return yaml.safe_dump_all(docs)


def _cpi_config(build: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"cpi-{build}", "namespace": ADDON_NS},
        "data": {"build": build},
    }


def _cpi_deployment(build: str) -> dict[str, Any]:
    labels = {"app": f"cpi-{build}"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": f"cpi-{build}", "namespace": ADDON_NS},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "cpi", "image": f"example.invalid/cpi:{build}"}]},
            },
        },
    }


def addons(old_minor: str, new_minor: str) -> list[dict[str, Any]]:
    """Two builds of an add-on and a CRS that gates upgrades on them. The new build's
    Deployment is Ready only once its status says so (no kubelet here)."""
    old, new = f"v{old_minor.replace('.', '-')}", f"v{new_minor.replace('.', '-')}"

    def config_map(name: str, text: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": NS},
            "data": {"cpi.yaml": text},
        }

    def within(minor: str) -> str:
        major, number = minor.split(".")
        return f">={minor}.0, <{major}.{int(number) + 1}.0"

    return [
        config_map(f"cpi-{old}", _manifest(_cpi_config(old))),
        config_map(f"cpi-{new}", _manifest(_cpi_config(new), _cpi_deployment(new))),
        {
            "apiVersion": CRS_API,
            "kind": "ClusterResourceSet",
            "metadata": {"name": "cpi", "namespace": NS},
            "spec": {
                "clusterSelector": {"matchLabels": {"upgrade-gate": "yes"}},
                "mode": "Reconcile",
                "gateUpgrades": True,
                "healthCheck": {"wait": True},
                "resources": [
                    {
                        "kind": "ConfigMap",
                        "name": f"cpi-{old}",
                        "kubernetesVersions": within(old_minor),
                    },
                    {
                        "kind": "ConfigMap",
                        "name": f"cpi-{new}",
                        "kubernetesVersions": within(new_minor),
                    },
                ],
            },
        },
    ]


def extension_config(controller: ControllerProcess) -> dict[str, Any]:
    """Registers crs-controller's Runtime Extension by URL (Cluster API accepts a
    ``url`` or a ``service``; https only), trusting its CA through ``caBundle``.

    ``namespaceSelector: {}`` (every namespace) is written out: Cluster API's
    admission webhook defaults it, and none runs here; left out, the registry turns
    the missing selector into one that matches no namespace, and every handler is
    skipped without a call (the hooks are then marked done as if none existed)."""
    return {
        "apiVersion": RUNTIME_API,
        "kind": "ExtensionConfig",
        "metadata": {"name": "crs-controller"},
        "spec": {
            "clientConfig": {
                "url": f"https://127.0.0.1:{controller.extension_port}",
                "caBundle": base64.b64encode(controller.extension_ca_pem).decode(),
            },
            "namespaceSelector": {},
        },
    }


def topology_cluster(version: str) -> dict[str, Any]:
    return {
        "apiVersion": V1BETA2,
        "kind": "Cluster",
        "metadata": {"name": CLUSTER, "namespace": NS, "labels": {"upgrade-gate": "yes"}},
        "spec": {
            "topology": {
                "classRef": {"name": "standin"},
                "version": version,
                "workers": {
                    "machineDeployments": [{"class": "worker", "name": "md-0", "replicas": 0}]
                },
            }
        },
    }


# --- reading state --------------------------------------------------------------


def _cluster(mgmt: TestbedClient) -> dict[str, Any]:
    cluster = mgmt.get(V1BETA2, "Cluster", CLUSTER, NS)
    assert cluster is not None
    return cluster


def _ref_of(mgmt: TestbedClient, field: str) -> tuple[str, str] | None:
    ref = (_cluster(mgmt).get("spec") or {}).get(field) or {}
    return (ref["kind"], ref["name"]) if ref.get("name") else None


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind), {})


def _pending(cluster: dict[str, Any]) -> str:
    return str((cluster["metadata"].get("annotations") or {}).get(PENDING_HOOKS, ""))


def _md(mgmt: TestbedClient) -> dict[str, Any] | None:
    items = mgmt.list(V1BETA2, "MachineDeployment", NS)
    return items[0] if items else None


def _md_version(mgmt: TestbedClient) -> str | None:
    md = _md(mgmt)
    return md["spec"]["template"]["spec"].get("version") if md else None


class ClusterWatch(Sampler):
    """Samples the Cluster every 0.1 s and keeps each change of its pending-hooks
    annotation, upgrade-step annotation and TopologyReconciled condition."""

    def __init__(self, mgmt: TestbedClient, since: Callable[[], float]) -> None:
        super().__init__(self._sample, 0.1)
        self._mgmt = mgmt
        self._since = since
        self.changes: list[Figures] = []
        self._last: tuple[str, ...] = ()

    def _sample(self) -> None:
        try:
            cluster = _cluster(self._mgmt)
        except Exception:  # a missed sample is only a gap in the record
            return
        condition = _condition(cluster, "TopologyReconciled")
        annotations = cluster["metadata"].get("annotations") or {}
        state = (
            _pending(cluster),
            str(annotations.get(UPGRADE_STEP, "")),
            str(condition.get("status", "")),
            str(condition.get("reason", "")),
            str(condition.get("message", "")),
        )
        if state != self._last:
            self._last = state
            keys = ("pending_hooks", "upgrade_step", "status", "reason", "message")
            self.changes.append(
                {"at": round(self._since(), 2), **dict(zip(keys, state, strict=True))}
            )

    def first(self, predicate: Callable[[Figures], bool]) -> float | None:
        return next((c["at"] for c in self.changes if predicate(c)), None)


def hook_calls(controller: ControllerProcess, since: float) -> list[Figures]:
    """Every hook answer crs-controller logged after ``since``: the hook, seconds
    since ``since`` and ``retryAfterSeconds``."""
    calls = []
    for line in controller.log_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("event") not in HOOKS or "timestamp" not in entry:
            continue
        at = datetime.fromisoformat(entry["timestamp"].replace("Z", "+00:00")).timestamp()
        if at >= since:
            calls.append(
                {
                    "hook": entry["event"],
                    "at": round(at - since, 2),
                    "retryAfterSeconds": entry.get("retry_after"),
                }
            )
    return calls


def capi_hook_lines(manager: CapiManager) -> list[str]:
    text = manager.log_path.read_text(errors="replace") if manager.log_path.exists() else ""
    return [
        _short(line) for line in text.splitlines() if any(key in line for key in CAPI_HOOK_LINES)
    ]


def _short(line: str) -> str:
    """A klog line without its header and the long upgrade-plan tail."""
    message = line.split("] ", 1)[-1]
    return message.split(" ControlPlaneUpgrades=", 1)[0][:300]


# --- playing the providers and the workload's kubelet ---------------------------


def _patch_status(mgmt: TestbedClient, api: str, kind: str, name: str, status: Figures) -> None:
    mgmt.patch_merge(api, kind, name, {"status": status}, namespace=NS, subresource="status")


def provision(mgmt: TestbedClient, plane: ControlPlane, version: str) -> None:
    """What the infrastructure and control plane providers would report once the
    topology controller created their objects: infrastructure provisioned at the
    workload server's endpoint, the control plane initialized and running ``version``."""
    wait_for(lambda: _ref_of(mgmt, "infrastructureRef"), 60, message="infrastructure created")
    wait_for(lambda: _ref_of(mgmt, "controlPlaneRef"), 60, message="control plane created")
    infra_kind, infra = _ref_of(mgmt, "infrastructureRef") or ("", "")
    host, port = plane.workloads[0].url.removeprefix("https://").rsplit(":", 1)
    endpoint = {"host": host, "port": int(port)}
    mgmt.patch_merge(
        INFRA_API, infra_kind, infra, {"spec": {"controlPlaneEndpoint": endpoint}}, namespace=NS
    )
    _patch_status(mgmt, INFRA_API, infra_kind, infra, {"initialization": {"provisioned": True}})
    report_version(mgmt, version, initialized=True)


def control_plane(mgmt: TestbedClient) -> dict[str, Any]:
    kind, name = _ref_of(mgmt, "controlPlaneRef") or ("", "")
    found = mgmt.get(CP_API, kind, name, NS)
    assert found is not None
    return found


def report_version(mgmt: TestbedClient, version: str, *, initialized: bool = False) -> None:
    cp = control_plane(mgmt)
    status: Figures = {"version": version}
    if initialized:
        status["initialization"] = {"controlPlaneInitialized": True}
    _patch_status(mgmt, CP_API, cp["kind"], cp["metadata"]["name"], status)


def mark_available(workload: TestbedClient, name: str) -> None:
    """Deployment status as its controller and kubelet would write it: one replica,
    up to date and available (kstatus then calls it Current)."""
    live = workload.get("apps/v1", "Deployment", name, ADDON_NS)
    assert live is not None
    now = datetime.now().astimezone().isoformat(timespec="seconds")
    status = copy.deepcopy(live.get("status") or {})
    status.update(
        observedGeneration=live["metadata"]["generation"],
        replicas=1,
        updatedReplicas=1,
        readyReplicas=1,
        availableReplicas=1,
        conditions=[
            {
                "type": "Available",
                "status": "True",
                "reason": "MinimumReplicasAvailable",
                "lastUpdateTime": now,
                "lastTransitionTime": now,
            },
            {
                "type": "Progressing",
                "status": "True",
                "reason": "NewReplicaSetAvailable",
                "lastUpdateTime": now,
                "lastTransitionTime": now,
            },
        ],
    )
    workload.patch_merge(
        "apps/v1", "Deployment", name, {"status": status}, namespace=ADDON_NS, subresource="status"
    )


# --- the run --------------------------------------------------------------------


def _minor(version: str) -> str:
    return ".".join(version.removeprefix("v").split(".")[:2])


def _has(client: TestbedClient, api: str, kind: str, name: str, namespace: str) -> bool:
    return client.get(api, kind, name, namespace) is not None


def _waited(message: str, timeout: float, predicate: Callable[[], object]) -> None:
    wait_for(predicate, timeout, interval=0.1, message=message)


def set_up(
    mgmt: TestbedClient,
    plane: ControlPlane,
    controller: ControllerProcess,
    args: argparse.Namespace,
) -> Figures:
    """ExtensionConfig discovered, ClusterClass reconciled, the Cluster provisioned at
    ``--from`` with the old build applied; returns what set-up took."""
    figures: Figures = {}
    began = time.time()
    mgmt.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    mgmt.apply(extension_config(controller))

    def handlers() -> list[str]:
        ext = mgmt.get(RUNTIME_API, "ExtensionConfig", "crs-controller") or {}
        return [h["name"] for h in (ext.get("status") or {}).get("handlers") or []]

    _waited("ExtensionConfig discovered", 60, handlers)
    figures["extension_handlers"] = handlers()
    for doc in [*cluster_class(), *addons(_minor(args.from_version), _minor(args.to_version))]:
        mgmt.apply(doc)

    def class_ready() -> bool:
        cc = mgmt.get(V1BETA2, "ClusterClass", "standin", NS) or {}
        ready = _condition(cc, "VariablesReady").get("status") == "True"
        return ready and cc["status"].get("observedGeneration") == cc["metadata"]["generation"]

    _waited("ClusterClass reconciled", 60, class_ready)
    mgmt.apply(kubeconfig_secret(plane.workloads[0], name=CLUSTER, namespace=NS))
    mgmt.apply(topology_cluster(args.from_version))
    provision(mgmt, plane, args.from_version)
    with TestbedClient(plane.workloads[0]) as workload:
        old = f"cpi-v{_minor(args.from_version).replace('.', '-')}"
        _waited("old build applied", 120, lambda: _has(workload, "v1", "ConfigMap", old, ADDON_NS))
    _waited(
        "topology reconciled at --from",
        120,
        lambda: (
            _condition(_cluster(mgmt), "TopologyReconciled").get("status") == "True"
            and _md_version(mgmt) == args.from_version
        ),
    )
    figures["set_up_seconds"] = round(time.time() - began, 1)
    return figures


def upgrade(
    mgmt: TestbedClient,
    plane: ControlPlane,
    controller: ControllerProcess,
    manager: CapiManager,
    args: argparse.Namespace,
) -> Figures:
    new = f"cpi-v{_minor(args.to_version).replace('.', '-')}"
    bumped = time.time()

    def since() -> float:
        return time.time() - bumped

    watch = ClusterWatch(mgmt, since)
    watch.start()
    marks: Figures = {}
    try:
        mgmt.patch_merge(
            V1BETA2,
            "Cluster",
            CLUSTER,
            {"spec": {"topology": {"version": args.to_version}}},
            namespace=NS,
        )
        _waited(
            "control plane asked for --to",
            60,
            lambda: control_plane(mgmt)["spec"].get("version") == args.to_version,
        )
        marks["control_plane_spec_version"] = round(since(), 2)
        marks["workers_version_while_control_plane_upgrades"] = _md_version(mgmt)
        time.sleep(args.rollout)  # the provider rolling its machines
        report_version(mgmt, args.to_version)
        marks["control_plane_reports_new_version"] = round(since(), 2)
        with TestbedClient(plane.workloads[0]) as workload:
            _waited(
                "new build applied",
                60,
                lambda: _has(workload, "apps/v1", "Deployment", new, ADDON_NS),
            )
            marks["new_build_applied"] = round(since(), 2)
            marks["hook_calls_before_add_on_ready"] = len(hook_calls(controller, bumped))
            ready_at = bumped + marks["control_plane_reports_new_version"] + args.addon_ready_after
            time.sleep(max(0.0, ready_at - time.time()))
            mark_available(workload, new)
            marks["new_build_ready"] = round(since(), 2)
        _waited("workers asked for --to", 120, lambda: _md_version(mgmt) == args.to_version)
        marks["workers_spec_version"] = round(since(), 2)
        _waited("upgrade complete", 120, lambda: _complete(mgmt))
        marks["topology_reconciled"] = round(since(), 2)
        time.sleep(1)
    finally:
        watch.stop()
    return summarize(marks, watch, hook_calls(controller, bumped), capi_hook_lines(manager))


def _complete(mgmt: TestbedClient) -> bool:
    cluster = _cluster(mgmt)
    annotations = cluster["metadata"].get("annotations") or {}
    done = _condition(cluster, "TopologyReconciled").get("status") == "True"
    return done and not _pending(cluster) and UPGRADE_STEP not in annotations


def summarize(
    marks: Figures, watch: ClusterWatch, calls: list[Figures], capi_lines: list[str]
) -> Figures:
    after = [c for c in calls if c["hook"] == "AfterControlPlaneUpgrade"]
    workers = [c for c in calls if c["hook"] == "BeforeWorkersUpgrade"]
    released = next((c["at"] for c in after if c["retryAfterSeconds"] == 0), None)
    blocking = watch.first(lambda c: "hooks are blocking" in c["message"])
    failed = [c for c in watch.changes if c["reason"] == "ReconcileFailed"]
    return {
        "seconds_from_version_bump": {
            **marks,
            "after_control_plane_upgrade_first_called": after[0]["at"] if after else None,
            "topology_reconciled_names_blocking_hook": blocking,
            "hold_released": released,
            "before_workers_upgrade_first_called": workers[0]["at"] if workers else None,
        },
        "held_seconds": round(released - after[0]["at"], 2) if after and released else None,
        "topology_reconcile_failures": [c["message"][-160:] for c in failed],
        "hook_calls": {
            "AfterControlPlaneUpgrade": len(after),
            "BeforeWorkersUpgrade": len(workers),
            "answers": calls,
        },
        "cluster_changes": watch.changes,
        "capi_log": capi_lines,
    }


def run(args: argparse.Namespace) -> Figures:
    plane = ControlPlane.start(1, audit=False)
    manager: CapiManager | None = None
    try:
        with TestbedClient(plane.management, timeout=30) as mgmt:
            tmp = Path(plane.root)
            install(mgmt, args.capi_crds, tmp)
            controller = ControllerProcess(plane.management, extension=True)
            with controller:
                manager = CapiManager(
                    args.capi_manager,
                    plane.management,
                    "--feature-gates=ClusterTopology=true,RuntimeSDK=true",
                    "--v=0",
                )
                manager.start()
                try:
                    figures: Figures = {
                        "capi_manager": str(args.capi_manager),
                        "kube_apiserver": plane.version,
                        "from": args.from_version,
                        "to": args.to_version,
                    }
                    figures |= set_up(mgmt, plane, controller, args)
                    figures |= upgrade(mgmt, plane, controller, manager, args)
                    return figures
                except (TimeoutError, RuntimeError, AssertionError) as exc:
                    raise RuntimeError(
                        f"{exc}\n--- Cluster API manager log:\n{manager.log_tail(60)}"
                        f"\n--- crs-controller log:\n{controller.log_tail(30)}"
                    ) from exc
                finally:
                    manager.stop()
                    if args.logs:
                        args.logs.mkdir(parents=True, exist_ok=True)
                        shutil.copy(manager.log_path, args.logs / "capi-manager.log")
                        shutil.copy(controller.log_path, args.logs / "crs-controller.log")
    finally:
        if manager is not None:
            manager.cleanup()
        plane.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--capi-manager",
        type=Path,
        default=Path.home() / ".cache" / "capi" / "manager",
        help="Cluster API's core manager binary (v1.12 or newer)",
    )
    parser.add_argument(
        "--capi-crds",
        type=Path,
        default=Path("/tmp/capi-src/core/config/crd/bases"),
        help="its core/config/crd/bases directory",
    )
    parser.add_argument("--from", dest="from_version", default="v1.33.4")
    parser.add_argument("--to", dest="to_version", default="v1.34.2")
    parser.add_argument(
        "--rollout",
        type=float,
        default=2.0,
        help="seconds the stand-in control plane takes to upgrade",
    )
    parser.add_argument(
        "--addon-ready-after",
        type=float,
        default=8.0,
        help="seconds after the control plane reports --to until the new "
        "build's Deployment is marked available on the workload",
    )
    parser.add_argument("--json-out", type=Path)
    parser.add_argument("--logs", type=Path, help="copy both controllers' logs here")
    args = parser.parse_args(argv)
    if not args.capi_manager.is_file():
        parser.error(f"--capi-manager {args.capi_manager} is not a file")
    if not args.capi_crds.is_dir():
        parser.error(f"--capi-crds {args.capi_crds} is not a directory")
    figures = run(args)
    text = json.dumps(figures, indent=2)
    print(text)
    if args.json_out:
        args.json_out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

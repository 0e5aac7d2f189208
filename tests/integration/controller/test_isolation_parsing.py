"""One tenant's input cannot stall or exhaust the controller for the others, on real
servers: a 1 MiB kubeconfig Secret is refused by its size before it is parsed
(``UnsupportedKubeconfig`` naming the limit) while /healthz keeps answering and
another namespace's CRS converges; a CRS naming 16 ConfigMaps of 1 MiB fetches and
parses nothing while no Cluster matches, and once one does, every source is parsed
while /healthz keeps answering; a ConfigMap whose snapshot size no number parses
("²") stops no other namespace's CRS. How fast /healthz answers and how much memory the
controller takes meanwhile are figures, not assertions: hack/bench/parsing.py."""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any, Self

import httpx
import yaml

from crs_controller.core.rollout.snapshots import SIZE_ANNOTATION, SNAPSHOT_LABEL
from crs_controller.testbed import Server, TestbedClient, wait_for
from crs_controller.testbed.controller import ControllerProcess

from .hostile import add_cluster_with_kubeconfig
from .support import (
    CRS_API,
    TIMEOUT,
    add_cluster,
    audit_caught_up,
    condition,
    configmap_obj,
    crs_obj,
    manifests,
    metric,
    reconciles,
    source_configmap,
    unique,
    wait_condition,
    wait_object,
)

Obj = dict[str, Any]
MIB = 1024 * 1024
# An answer that takes longer than this counts as none: well above the stalls the
# parses cause on a busy two-core machine (seconds: hack/bench/parsing.py prints
# them), well below a process that has stopped answering.
PROBE_TIMEOUT = 15.0
# One pass over the 16 ConfigMaps parses each (the parsed cache holds a few of them),
# 2 to 9 s apiece on a busy two-core machine, and the status comes after the whole
# pass: minutes, on a bad day.
PARSE_TIMEOUT = 600.0


class Healthz:
    """Asks the controller's /healthz again and again, on a thread, while a test
    runs: one request at a time, the next one ``PAUSE`` after the last is answered.
    Keeps the answers that were not a 200 in time (``failures``).

    With no failure, and an answer both before the hostile input and after the
    controller has dealt with it, /healthz answered all along: a stall longer than
    ``PROBE_TIMEOUT`` (and the pause) would have failed the request waiting on it.
    Nothing here counts answers against time."""

    PAUSE = 0.1

    def __init__(self, controller: ControllerProcess) -> None:
        self._url = controller.url("/healthz")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._answered = threading.Condition()
        self.answers = 0  # requests done, answered in time or not
        self.failures: list[str] = []

    def __enter__(self) -> Self:
        self._thread.start()
        self.next_answer()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()

    def next_answer(self) -> None:
        """Wait for an answer to a request sent from now on (the request in flight may
        have been sent before)."""
        with self._answered:
            wanted = self.answers + 2
            done = self._answered.wait_for(
                lambda: self.answers >= wanted or self._stop.is_set(), TIMEOUT
            )
        assert done and self.answers >= wanted, f"/healthz: {self.failures or 'no answer'}"

    def _run(self) -> None:
        with httpx.Client(timeout=PROBE_TIMEOUT) as http:
            while not self._stop.wait(self.PAUSE):
                try:
                    answer = http.get(self._url)
                    if answer.status_code != 200:
                        self.failures.append(f"HTTP {answer.status_code}")
                except httpx.HTTPError as exc:
                    self.failures.append(type(exc).__name__)
                with self._answered:
                    self.answers += 1
                    self._answered.notify_all()


def new_namespace(mgmt: TestbedClient) -> str:
    name = unique("other")
    mgmt.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


# --- a 1 MiB kubeconfig --------------------------------------------------------------


def huge_kubeconfig() -> str:
    """A kubeconfig (server refused on connect) padded to 1 MiB with the YAML that is
    the slowest to parse per byte: a flow sequence of one-letter strings."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    head = yaml.safe_dump(config)
    count = (MIB - len(head) - 40) // 2
    return head + "preferences: {pad: [" + ",".join(["a"] * count) + "]}\n"


def test_a_1_mib_kubeconfig_is_refused_by_size_and_healthz_keeps_answering(
    controller: ControllerProcess,
    mgmt: TestbedClient,
    workloads: list[Server],
    workload_clients: list[TestbedClient],
    namespace: str,
) -> None:
    other_ns = new_namespace(mgmt)
    try:
        with Healthz(controller) as health:
            mgmt.create(source_configmap(namespace, "h", {"a": manifests(configmap_obj("h"))}))
            mgmt.create(crs_obj(namespace, "huge", [("ConfigMap", "h")], {"huge": "1"}))
            add_cluster_with_kubeconfig(mgmt, namespace, "huge", {"huge": "1"}, huge_kubeconfig())
            good = unique("good")
            mgmt.create(source_configmap(other_ns, "g", {"a": manifests(configmap_obj(good))}))
            add_cluster(mgmt, workloads[1], other_ns, "fine", {"fine": "1"})
            mgmt.create(crs_obj(other_ns, "g", [("ConfigMap", "g")], {"fine": "1"}))
            # The positive sign: the bad cluster was reconciled, and retried.
            key = f"{namespace}/huge"
            wait_for(
                lambda: reconciles(controller, "cluster", key) >= 2,
                TIMEOUT,
                message=f"two reconciles of {key}",
            )
            wait_object(workload_clients[1], "v1", "ConfigMap", good, "default")
            wait_condition(mgmt, other_ns, "g", "Ready", "True", "Applied")
            health.next_answer()
        assert health.failures == [], health.failures
        cond = wait_condition(mgmt, namespace, "huge", "Ready", "False", "UnsupportedKubeconfig")
        assert "larger than 64 KiB" in cond["message"], cond["message"]
        assert "pad" not in cond["message"]
    finally:
        mgmt.delete("v1", "Namespace", other_ns)


# --- a snapshot size no number parses -------------------------------------------------


def test_a_snapshot_size_no_number_parses_stops_no_other_namespace(
    controller: ControllerProcess,
    mgmt: TestbedClient,
    workloads: list[Server],
    workload_clients: list[TestbedClient],
) -> None:
    # Listed first (namespaces in name order): nothing listed after it may be missed.
    tenant = unique("a-tenant")
    mgmt.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": tenant}})
    other_ns = new_namespace(mgmt)
    try:
        meta = {
            "name": "poison",
            "namespace": tenant,
            "labels": {SNAPSHOT_LABEL: "x"},
            "annotations": {SIZE_ANNOTATION: "\u00b2"},  # isdigit(), and int() refuses it
        }
        mgmt.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta})
        # Created after it: seen only if the ConfigMaps are still watched.
        good = unique("good")
        mgmt.create(source_configmap(other_ns, "g", {"a": manifests(configmap_obj(good))}))
        add_cluster(mgmt, workloads[1], other_ns, "fine", {"fine": "1"})
        mgmt.create(crs_obj(other_ns, "g", [("ConfigMap", "g")], {"fine": "1"}))
        wait_object(workload_clients[1], "v1", "ConfigMap", good, "default")
        wait_condition(mgmt, other_ns, "g", "Ready", "True", "Applied")
    finally:
        mgmt.delete("v1", "Namespace", other_ns)
        mgmt.delete("v1", "Namespace", tenant)


# --- 16 ConfigMaps of 1 MiB -----------------------------------------------------------


def filler(index: int) -> str:
    """One object of a kind the workload does not serve, of about 1 MiB, made to hold
    the most Python objects the limits let through: 195,000 empty mappings (just under
    the 200,000 distinct nodes a value may have; 13 MiB once parsed) and a long string
    to make up the size."""
    head = f"apiVersion: example.com/v1\nkind: Filler\nmetadata:\n  name: fill-{index}\n"
    items = "spec: [" + ",".join(["{}"] * 195_000) + "]\n"
    note = "note: " + "x" * (MIB - 4096 - len(head) - len(items)) + "\n"
    return head + items + note


def get_requests(server: Server, namespace: str, names: set[str]) -> list[str]:
    return [
        event["objectRef"]["name"]
        for event in server.audit_events()
        if event["verb"] == "get"
        and event.get("objectRef", {}).get("resource") == "configmaps"
        and event["objectRef"].get("namespace") == namespace
        and event["objectRef"].get("name") in names
    ]


def parses(controller: ControllerProcess) -> float:
    return metric(httpx.get(controller.url("/metrics"), timeout=5).text, "crs_source_parses_total")


def test_16_configmaps_of_1_mib_are_not_parsed_without_a_cluster_and_healthz_keeps_answering(
    controller: ControllerProcess, mgmt: TestbedClient, workloads: list[Server], namespace: str
) -> None:
    names = {f"fill-{i}" for i in range(16)}
    with Healthz(controller) as health:
        for i in range(16):
            mgmt.create(source_configmap(namespace, f"fill-{i}", {"a.yaml": filler(i)}))
        before = parses(controller)
        resources = [("ConfigMap", name) for name in sorted(names)]
        mgmt.create(crs_obj(namespace, "fills", resources, {"fills": "1"}))
        # The positive sign that the controller looked: it wrote the status.
        wait_condition(mgmt, namespace, "fills", "Ready", "True", "NoMatchingClusters")
        audit_caught_up([controller.management])
        assert get_requests(controller.management, namespace, names) == []
        assert parses(controller) == before
        # A Cluster that matches: every source is fetched and parsed.
        add_cluster(mgmt, workloads[0], namespace, "filled", {"fills": "1"})

        def failed() -> Obj | None:
            crs = mgmt.get(CRS_API, "ClusterResourceSet", "fills", namespace)
            ready = condition(crs, "Ready")
            waiting = ("NoMatchingClusters", "WaitingForClusters")
            return ready if ready and ready["reason"] not in waiting else None

        # The workload serves no Filler: the apply fails, after every source is parsed.
        wait_for(failed, PARSE_TIMEOUT, message="fills applied or failed")
        assert parses(controller) >= before + 16
        health.next_answer()
    assert health.failures == [], health.failures

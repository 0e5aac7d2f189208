"""One tenant's input cannot stall or exhaust the controller for the others, on real
servers: a 1 MiB kubeconfig Secret is refused by its size before it is parsed
(``UnsupportedKubeconfig`` naming the limit) while /healthz keeps answering and
another namespace's CRS converges; a CRS naming 16 ConfigMaps of 1 MiB fetches and
parses nothing while no Cluster matches, and once one does, the controller's memory
stays bounded."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import httpx
import yaml

from crs_controller.testbed import Server, TestbedClient, wait_for
from crs_controller.testbed.controller import ControllerProcess

from .hostile import add_cluster_with_kubeconfig
from .support import (
    CRS_API,
    TIMEOUT,
    add_cluster,
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


MIN_POLLS = 11


class Watch:
    """Polls the controller in a thread while a test runs: /healthz's slowest answer
    and failures, and the largest resident set seen (VmRSS of /proc/<pid>/status)."""

    def __init__(self, controller: ControllerProcess) -> None:
        assert controller.pid is not None
        self._status = Path(f"/proc/{controller.pid}/status")
        self._url = controller.url("/healthz")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.slowest = 0.0
        self.failures: list[str] = []
        self.peak_rss_mib = 0.0
        self.polls = 0

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        # A run that went quickly still looks at least MIN_POLLS times (a second or so
        # more), so the figures never rest on a handful of answers.
        deadline = time.monotonic() + 30
        while kind is None and self.polls < MIN_POLLS and time.monotonic() < deadline:
            time.sleep(0.05)
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        with httpx.Client(timeout=5.0) as http:
            while not self._stop.wait(0.1):
                started = time.monotonic()
                try:
                    answer = http.get(self._url)
                    if answer.status_code != 200:
                        self.failures.append(f"HTTP {answer.status_code}")
                except httpx.HTTPError as exc:
                    self.failures.append(type(exc).__name__)
                self.slowest = max(self.slowest, time.monotonic() - started)
                self.peak_rss_mib = max(self.peak_rss_mib, status_mib(self._status, "VmRSS"))
                self.polls += 1


def status_mib(path: Path, field: str) -> float:
    for line in path.read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no {field}")


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
        with Watch(controller) as watch:
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
        assert watch.polls >= MIN_POLLS
        assert watch.failures == [], watch.failures
        assert watch.slowest < 1.0, f"/healthz took {watch.slowest:.2f} s"
        cond = wait_condition(mgmt, namespace, "huge", "Ready", "False", "UnsupportedKubeconfig")
        assert "larger than 64 KiB" in cond["message"], cond["message"]
        assert "pad" not in cond["message"]
    finally:
        mgmt.delete("v1", "Namespace", other_ns)


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


# The Deployment's memory limit is 512 Mi (config/manager/manager.yaml); the bound is
# three quarters of it. At rest the controller takes ~60 MiB; the byte budgets hold
# at most 32 MiB of fetched sources and 64 MiB of parsed objects; two parses at once
# each peak near 80 MiB for a value of this shape (its composed node graph), however
# many sources there are. Measured: 332 MiB; before the budgets, 450 MiB for these 16
# (and more with every further source: the 128 parsed entries had no size).
RSS_BOUND_MIB = 384


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


def test_16_configmaps_of_1_mib_are_not_parsed_without_a_cluster_and_memory_stays_bounded(
    controller: ControllerProcess, mgmt: TestbedClient, workloads: list[Server], namespace: str
) -> None:
    names = {f"fill-{i}" for i in range(16)}
    with Watch(controller) as watch:
        for i in range(16):
            mgmt.create(source_configmap(namespace, f"fill-{i}", {"a.yaml": filler(i)}))
        before = parses(controller)
        resources = [("ConfigMap", name) for name in sorted(names)]
        mgmt.create(crs_obj(namespace, "fills", resources, {"fills": "1"}))
        # The positive sign that the controller looked: it wrote the status.
        wait_condition(mgmt, namespace, "fills", "Ready", "True", "NoMatchingClusters")
        assert get_requests(controller.management, namespace, names) == []
        assert parses(controller) == before
        # A Cluster that matches: every source is fetched and parsed, within bounds.
        add_cluster(mgmt, workloads[0], namespace, "filled", {"fills": "1"})

        def failed() -> Obj | None:
            crs = mgmt.get(CRS_API, "ClusterResourceSet", "fills", namespace)
            ready = condition(crs, "Ready")
            waiting = ("NoMatchingClusters", "WaitingForClusters")
            return ready if ready and ready["reason"] not in waiting else None

        # The workload serves no Filler: the apply fails, after every source is parsed.
        wait_for(failed, TIMEOUT, message="fills applied or failed")
        assert parses(controller) >= before + 16
    assert watch.peak_rss_mib < RSS_BOUND_MIB, f"peak RSS {watch.peak_rss_mib:.0f} MiB"

"""Fair share of the workers between tenants, on real servers: tenant A has ten
Clusters whose API server (a local TLS server) answers one byte every 2 s, which no
per-read timeout ever trips; tenant B has one real workload cluster. With four
workers, A's clusters hold at most three of them (the fourth is kept for the other
namespaces), so B's edit reaches its cluster while A's requests are all still held,
instead of waiting for a worker to come free. The test's controller takes 600 s for a
workload request (``--workload-timeout``; 15 s by default), longer than a reconcile
may last (300 s): only a reconcile's end could free one of A's workers, long after
the test.

Also here, as it is about one process not passing for another: two `run --shard`
replicas on one host without $POD_NAME are two members, not one.

The session's controller is stopped meanwhile (it would act on these clusters too)
and started again afterwards.
"""

from __future__ import annotations

import itertools
import socket
import socketserver
import ssl
import threading
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest

from crs_controller.testbed import TestbedClient, wait_for
from crs_controller.testbed.controller import SYSTEM_NAMESPACE, ControllerProcess

from .hostile import add_cluster_with_kubeconfig, kubeconfig, pem_b64, serving_context
from .support import (
    CRS_API,
    TIMEOUT,
    add_cluster,
    clear_leases,
    configmap_obj,
    crs_obj,
    manifests,
    metric,
    shard_metric,
    source_configmap,
    unique,
)

CONCURRENCY = 4
SHARE = CONCURRENCY - 1  # the reserve at four workers: one
SLOW_CLUSTERS = [f"slow-{n}" for n in range(10)]
DRIP_SECONDS = 2.0
# Status line and headers alone take minutes at one byte per 2 s.
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"


class Drip:
    """A TLS server on loopback that reads a request and answers one byte every 2 s.
    It counts the Clusters (their bearer token) with a connection open right now, and
    the bytes sent on each open connection."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.open: Counter[str] = Counter()
        self.peak = 0  # most Clusters with a connection open at once
        self.sent: dict[int, int] = {}  # open connection (its number) -> bytes sent on it
        self._numbers = itertools.count()
        self.stopped = threading.Event()
        context, self.ca_pem = serving_context("drip-ca")
        drip = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                drip.serve(self.request)

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def busy(self) -> int:
        with self.lock:
            return len(+self.open)

    def held(self, drips: int) -> set[int]:
        """The open connections that have been sent at least ``drips`` bytes: each has
        been held for ``drips - 1`` drip intervals and more."""
        with self.lock:
            return {conn for conn, sent in self.sent.items() if sent >= drips}

    def still_open(self, conns: set[int]) -> bool:
        with self.lock:
            return conns <= set(self.sent)

    def serve(self, sock: ssl.SSLSocket) -> None:
        request = b""
        try:
            sock.settimeout(30)
            while b"\r\n\r\n" not in request:
                chunk = sock.recv(4096)
                if not chunk:
                    return
                request += chunk
        except OSError:
            return
        cluster = _bearer(request)
        with self.lock:
            conn = next(self._numbers)
            self.open[cluster] += 1
            self.peak = max(self.peak, len(+self.open))
            self.sent[conn] = 0
        try:
            for n in range(len(ANSWER)):
                if self.stopped.wait(DRIP_SECONDS if n else 0):
                    return
                sock.sendall(ANSWER[n : n + 1])
                with self.lock:
                    self.sent[conn] += 1
        except OSError:
            return  # the controller gave up on it
        finally:
            with self.lock:
                self.open[cluster] -= 1
                del self.sent[conn]

    def close(self) -> None:
        self.stopped.set()
        self.server.shutdown()
        self.server.server_close()


def _bearer(request: bytes) -> str:
    for line in request.decode("latin-1").split("\r\n"):
        name, _, value = line.partition(":")
        if name.strip().lower() == "authorization":
            return value.strip().removeprefix("Bearer ")
    return "?"


@pytest.fixture
def four_workers(controller: ControllerProcess) -> Iterator[ControllerProcess]:
    controller.stop()
    try:
        extra = ("--concurrency", str(CONCURRENCY), "--log-level", "debug")
        extra += ("--workload-timeout", "600")
        with ControllerProcess(controller.management, *extra) as process:
            yield process
    finally:
        controller.start()


def test_a_tenant_with_slow_clusters_leaves_a_worker_for_the_others(
    four_workers: ControllerProcess,
    mgmt: TestbedClient,
    workloads,
    workload_clients,
    namespace: str,
) -> None:
    tenant_b, tenant_a = namespace, unique("slow-tenant")
    mgmt.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": tenant_a}})
    marker = unique("fair")
    drip = Drip()
    try:
        mgmt.create(source_configmap(tenant_b, "b", {"a": manifests(configmap_obj(marker, v="1"))}))
        add_cluster(mgmt, workloads[0], tenant_b, "b1", {"tenant": "b"})
        mgmt.create(crs_obj(tenant_b, "b", [("ConfigMap", "b")], {"tenant": "b"}, "Reconcile"))
        workload = workload_clients[0]
        wait_for(lambda: _version(workload, marker) == "1", TIMEOUT, message="B applied")

        server = {"server": f"https://127.0.0.1:{drip.port}"}
        server["certificate-authority-data"] = pem_b64(drip.ca_pem)
        mgmt.create(source_configmap(tenant_a, "a", {"a": manifests(configmap_obj(unique("a")))}))
        for name in SLOW_CLUSTERS:
            config = kubeconfig(server, {"token": name})
            add_cluster_with_kubeconfig(mgmt, tenant_a, name, {"tenant": "a"}, config)
        mgmt.create(crs_obj(tenant_a, "a", [("ConfigMap", "a")], {"tenant": "a"}))

        # Positive sign: A's clusters are being worked on, as many as it may hold
        # (every worker, without a fair share), and stay held: each of those requests
        # has been answered three bytes, two drip intervals apart.
        def held_for_two_drips() -> set[int] | None:
            conns = drip.held(3)
            return conns if len(conns) >= SHARE else None

        held = wait_for(held_for_two_drips, TIMEOUT, message="A's clusters held")

        source = mgmt.get("v1", "ConfigMap", "b", tenant_b)
        source["data"] = {"a": manifests(configmap_obj(marker, v="2"))}
        mgmt.update(source)
        wait_for(lambda: _version(workload, marker) == "2", TIMEOUT, message="B's edit")
        # B did not wait for a worker to come free: A's held requests are all still
        # held, and A never had more than its share.
        assert drip.still_open(held), "one of A's requests ended before B's edit was applied"
        assert drip.peak <= SHARE, f"{drip.peak} of {CONCURRENCY} workers held by one tenant"
        waits = metric(
            httpx.get(four_workers.url("/metrics"), timeout=5).text, "crs_queue_fair_waits_total"
        )
        assert waits >= 1
    finally:
        drip.close()
        mgmt.delete(CRS_API, "ClusterResourceSet", "a", tenant_a)
        for name in SLOW_CLUSTERS:
            mgmt.delete("cluster.x-k8s.io/v1beta1", "Cluster", name, tenant_a)
        mgmt.delete("v1", "Namespace", tenant_a)


def _version(client: TestbedClient, name: str) -> str | None:
    found = client.get("v1", "ConfigMap", name, "default")
    return None if found is None else (found.get("data") or {}).get("v")


@pytest.fixture
def session_stopped(controller: ControllerProcess, mgmt: TestbedClient) -> Iterator[None]:
    controller.stop()
    clear_leases(mgmt)
    try:
        yield
    finally:
        clear_leases(mgmt)
        controller.start()


def test_two_replicas_on_one_host_without_a_pod_name_are_two_members(
    controller: ControllerProcess, session_stopped: None, mgmt: TestbedClient, namespace: str
) -> None:
    args = ("--shard", "--lease-duration", "6s", "--namespace", namespace)
    no_pod_name = {"POD_NAME": ""}
    with (
        ControllerProcess(controller.management, *args, env=no_pod_name) as first,
        ControllerProcess(controller.management, *args, env=no_pod_name) as second,
    ):
        wait_for(
            lambda: all(shard_metric(p, "crs_shard_members") == 2 for p in (first, second)),
            TIMEOUT,
            message="two members",
        )
        leases = mgmt.list("coordination.k8s.io/v1", "Lease", SYSTEM_NAMESPACE)
        holders = {
            lease["spec"]["holderIdentity"]
            for lease in leases
            if lease["metadata"]["name"].startswith("crs-controller-shard-")
        }
        assert len(holders) == 2, holders
        host = socket.gethostname()
        assert all(h.startswith(f"{host}-") for h in holders), holders

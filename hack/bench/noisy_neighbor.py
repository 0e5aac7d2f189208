"""Benchmark: one tenant against the others (issue 20's noisy-neighbour objective).

On the test bed's real kube-apiservers and etcd, the controller runs as the shipped
Deployment runs it (the arguments of config/manager/manager.yaml, the defaults of
everything else: --concurrency, --workload-timeout, /healthz on). Tenant "good" has a
few real workload clusters and one CRS. Once they are served, tenant "attacker"
writes all of issue 20's findings at once:

- forge:    its own binding lists a kube-system Deployment and another team's
            ConfigMap (created directly on the workload server), deletionPolicy Delete;
- bigkube:  a 1 MiB kubeconfig Secret (refused: it asks for an exec plugin);
- enckey:   a kubeconfig whose client-key-data is encrypted (the controller's stdin
            is a silent pipe, as under a supervisor: a prompt blocks);
- drip:     Clusters whose server answers one byte every 2 s;
- bomb:     a server whose discovery answer is 63 MiB of ``{}`` values;
- pages:    a server answering the health check's LIST with endless continue pages;
- big:      one CRS naming 16 ConfigMaps of 1 MiB, matching no Cluster;
- tangle:   800 CRSs each depending on the next 10;
- esc:      an object name with an escape sequence and \\r\\n;
- nocrd:    a custom resource whose CRD is not installed.

Meanwhile "good" edits its ConfigMap five times, each once the previous edit is on
all its clusters. Printed as JSON: each edit's seconds; /healthz latency (polled
every 150 ms); the controller's RSS (VmRSS every 200 ms, VmHWM at the end); for
each finding, the seconds until the attacker's CRS status carries a failure for its
broken clusters, with the reason; whether the forged binding's foreign objects still
exist; the machine; and each objective with pass or fail. Exit 1 if one fails.

Loopback only; the run stops by itself and stops every process it started: about a
minute when every finding is handled, at most about four when edits time out
(--edit-timeout) and findings go unreported (2 min). The controller is killed if its
RSS passes --rss-abort-mib (the figures then say so), sooner than the machine's OOM
killer would.

    .venv/bin/python hack/bench/noisy_neighbor.py --json-out /tmp/noisy.json
    .venv/bin/python hack/bench/noisy_neighbor.py --quick --only drip pages
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import dataclasses
import datetime
import functools
import http.server
import json
import re
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml
from common import REPO, Figures, HealthProbe, MemoryProbe, git_state, machine, vm_kib, warm_up
from cryptography.hazmat.primitives import serialization

from crs_controller.testbed import ControlPlane, KubeError, Server, TestbedClient, wait_for
from crs_controller.testbed.certs import CertificateAuthority
from crs_controller.testbed.clusters import install_crds, register_cluster, set_cluster_initialized
from crs_controller.testbed.controller import ControllerProcess, install_rbac

CRS_API = "addons.crs.dev/v1alpha1"
CLUSTER_API = "cluster.x-k8s.io/v1beta1"
ATTACKER, GOOD, OTHER_TEAM = "attacker", "good", "team-b"
ATTACKER_USER, GOOD_USER = "attacker-admin", "good-admin"
MANAGER = REPO / "config" / "manager" / "manager.yaml"
MIB = 1024 * 1024
EDITS = 5
OBJECTIVES = {"edit_seconds": 5.0, "healthz_seconds": 1.0, "report_seconds": 120.0}
# Reasons that say "this failed" (SPEC: a source problem or a cluster failure); the
# others say "wait". A reason this list does not know counts as a failure too.
WAITING = {"Applied", "Pending", "Progressing", "DependencyNotReady", "WaitingForClusters"}
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
FINDINGS = ("forge", "bigkube", "enckey", "drip", "bomb", "pages", "big", "tangle", "esc", "nocrd")

Obj = dict[str, Any]


@dataclass(frozen=True)
class Load:
    """How much of each finding the attacker writes."""

    drip_clusters: int = 10
    big_configmaps: int = 16
    tangle: int = 800
    kubeconfig_bytes: int = 1_040_000  # a Secret's data may hold 1 MiB in all
    discovery_bytes: int = 63 * MIB
    page_bytes: int = 2 * MIB
    page_budget: int = 100  # the hostile server ends its list after this many pages


QUICK = Load(drip_clusters=3, big_configmaps=4, tangle=100)


def log(message: str) -> None:
    print(f"noisy_neighbor.py: {message}", file=sys.stderr, flush=True)


def now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- The shipped Deployment ---------------------------------------------------------


def deployment() -> tuple[list[str], float]:
    """The manager's arguments (after ``run``) and its memory limit in MiB. The
    extension's flags are left out: its certificate Secret is optional, and without
    it the Deployment runs with the extension off too."""
    docs = [d for d in yaml.safe_load_all(MANAGER.read_text()) if d]
    pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    args, kept = container["args"][1:], []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in ("--extension-addr", "--extension-cert-dir"):
            skip = True
        else:
            kept.append(arg)
    return kept, mib_of(container["resources"]["limits"]["memory"])


def mib_of(quantity: str) -> float:
    units = {"Ki": 1 / 1024, "Mi": 1.0, "Gi": 1024.0, "M": 1e6 / MIB, "G": 1e9 / MIB}
    for suffix, factor in units.items():
        if quantity.endswith(suffix):
            return float(quantity.removesuffix(suffix)) * factor
    return float(quantity) / MIB


# --- Hostile workload servers (loopback TLS) ----------------------------------------


def _status(code: int, message: str) -> bytes:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message}
    return json.dumps({**body, "reason": "NotFound", "code": code}).encode()


RESOURCES = {
    "kind": "APIResourceList",
    "apiVersion": "v1",
    "groupVersion": "v1",
    "resources": [
        {"name": "configmaps", "kind": "ConfigMap", "namespaced": True, "verbs": ["get", "list"]},
        {"name": "namespaces", "kind": "Namespace", "namespaced": False, "verbs": ["get"]},
    ],
}
BASICS = {
    "/version": {"major": "1", "minor": "34", "gitVersion": "v1.34.0"},
    "/api": {"kind": "APIVersions", "versions": ["v1"]},
    "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": []},
    "/api/v1": RESOURCES,
}


def discovery_bomb(size: int) -> bytes:
    head = b'{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"v1","resources":['
    count = (size - len(head) - 2) // 3
    return head + b"{}," * count + b"{}]}"


def page_items(size: int) -> bytes:
    item = '{"metadata":{"name":"cm-%07d","namespace":"default","resourceVersion":"1"}}'
    count = size // len(item % 0)
    return ",".join(item % i for i in range(count)).encode()


class Hostile(http.server.ThreadingHTTPServer):
    """A TLS server on loopback that speaks just enough of the Kubernetes API for
    the controller to reach the answer it is there to give (``behaviour``)."""

    daemon_threads = True

    def __init__(self, behaviour: str, load: Load) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.behaviour = behaviour
        self.load = load
        self.stopping = threading.Event()
        self.requests: Counter[str] = Counter()
        self.bodies: dict[str, bytes] = {}
        if behaviour == "bomb":
            self.bodies["bomb"] = discovery_bomb(load.discovery_bytes)
        if behaviour == "pages":
            self.bodies["items"] = page_items(load.page_bytes)
        self.ca = CertificateAuthority.generate(f"hostile-{behaviour}-ca")
        pair = self.ca.issue_serving()
        with tempfile.TemporaryDirectory() as tmp:
            cert, key = Path(tmp, "tls.crt"), Path(tmp, "tls.key")
            cert.write_bytes(pair.cert_pem)
            key.write_bytes(pair.key_pem)
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(cert, key)
        self.socket = context.wrap_socket(self.socket, server_side=True)
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.server_address[1]}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.shutdown()
        self.server_close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hangs up mid-answer is what these servers are for

    def kubeconfig(self, cluster: str) -> Obj:
        ca = base64.b64encode(self.ca.cert_pem).decode()
        return kubeconfig(cluster, {"server": self.url, "certificate-authority-data": ca}, {})


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Hostile
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _answer(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        view = memoryview(body)
        for start in range(0, len(body), MIB):
            if self.server.stopping.is_set():
                return
            self.wfile.write(view[start : start + MIB])

    def _drip(self) -> None:
        """A well-formed answer, one byte every 2 s: no single read ever waits long."""
        body = json.dumps(RESOURCES).encode()
        head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}"
        for byte in head.encode() + b"\r\n\r\n" + body:
            self.wfile.write(bytes([byte]))
            self.wfile.flush()
            if self.server.stopping.wait(2.0):
                return
        self.close_connection = True

    def _route(self) -> None:
        path, _, query = self.path.partition("?")
        kind = self.server.behaviour
        self.server.requests[
            f"{self.command} {path}{' (continue)' if 'continue=' in query else ''}"
        ] += 1
        body = self._body()
        if kind == "drip":
            self._drip()
        elif kind == "bomb" and path == "/api/v1":
            self._answer(200, self.server.bodies["bomb"])
        elif path in BASICS:
            self._answer(200, json.dumps(BASICS[path]).encode())
        elif kind == "pages" and self.command == "PATCH":
            self._answer(200, json.dumps(echo(body, path)).encode())
        elif kind == "pages" and self.command == "GET" and path.endswith("/configmaps"):
            self._answer(200, self._page(query))
        else:
            self._answer(404, _status(404, f"{path} not found"))

    def _page(self, query: str) -> bytes:
        """One page of ConfigMaps and a continue token, until the page budget."""
        match = re.search(r"continue=page-(\d+)", query)
        number = int(match.group(1)) if match else 0
        more = (
            f',"continue":"page-{number + 1}"' if number + 1 < self.server.load.page_budget else ""
        )
        meta = f'{{"resourceVersion":"1"{more}}}'
        head = f'{{"kind":"ConfigMapList","apiVersion":"v1","metadata":{meta},"items":['
        return head.encode() + self.server.bodies["items"] + b"]}"

    do_GET = do_PATCH = do_POST = do_PUT = do_DELETE = _route  # noqa: N815 - http.server names


def echo(body: bytes, path: str) -> Obj:
    """What an apply answers: the object sent, with the server's metadata."""
    try:
        obj = yaml.safe_load(body) or {}
    except yaml.YAMLError:
        obj = {}
    if not isinstance(obj, dict):
        obj = {}
    meta = obj.setdefault("metadata", {})
    meta.setdefault("name", path.rsplit("/", 1)[-1])
    meta.update(uid="00000000-0000-0000-0000-000000000001", resourceVersion="1", generation=1)
    meta["managedFields"] = [{"manager": "crs-controller", "operation": "Apply"}]
    return obj


# --- Objects both tenants write -----------------------------------------------------


def kubeconfig(name: str, cluster: Obj, user: Obj) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": "u"}}],
        "current-context": name,
    }


def cluster_with(mgmt: TestbedClient, name: str, finding: str, value: bytes) -> None:
    """A Cluster in the attacker's namespace whose kubeconfig Secret holds ``value``."""
    labels = {"finding": finding}
    mgmt.create(
        {
            "apiVersion": CLUSTER_API,
            "kind": "Cluster",
            "metadata": {"name": name, "namespace": ATTACKER, "labels": labels},
            "spec": {"controlPlaneEndpoint": {"host": "127.0.0.1", "port": 6443}},
        }
    )
    mgmt.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": f"{name}-kubeconfig",
                "namespace": ATTACKER,
                "labels": {"cluster.x-k8s.io/cluster-name": name},
            },
            "type": "cluster.x-k8s.io/secret",
            "data": {"value": base64.b64encode(value).decode()},
        }
    )
    set_cluster_initialized(mgmt, name=name, namespace=ATTACKER)


def real_cluster(
    mgmt: TestbedClient, server: Server, namespace: str, name: str, labels: Obj
) -> None:
    user = GOOD_USER if namespace == GOOD else ATTACKER_USER
    register_cluster(
        mgmt,
        server,
        name=name,
        namespace=namespace,
        labels=labels,
        kubeconfig_user=user,
        kubeconfig_groups=("system:masters",),
    )


def configmap(name: str, namespace: str | None = "default", **data: str) -> Obj:
    meta: Obj = {"name": name} if namespace is None else {"name": name, "namespace": namespace}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def source(namespace: str, name: str, *objs: Obj, text: str | None = None) -> Obj:
    content = text if text is not None else yaml.safe_dump_all(objs)
    return configmap(name, namespace, **{"objects.yaml": content})


def crs(namespace: str, name: str, resources: list[str], finding: str, **spec: Any) -> Obj:
    return {
        "apiVersion": CRS_API,
        "kind": "ClusterResourceSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "clusterSelector": {"matchLabels": {"finding": finding}},
            "resources": [{"kind": "ConfigMap", "name": r} for r in resources],
            "mode": "Reconcile",
            **spec,
        },
    }


def foreign_objects() -> list[Obj]:
    """Objects on the workload server that no CRS applied: the forged binding's targets."""
    labels = {"app": "foreign-dns"}
    pod = {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "dns", "image": "x"}]}}
    return [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "foreign-dns", "namespace": "kube-system"},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": pod},
        },
        configmap("team-b-settings", OTHER_TEAM, owner="team-b"),
    ]


def refs(objects: list[Obj]) -> list[Obj]:
    """Inventory entries for ``objects``, as a forger writes them into a binding."""
    return [
        {
            "apiVersion": o["apiVersion"],
            "kind": o["kind"],
            "namespace": o["metadata"]["namespace"],
            "name": o["metadata"]["name"],
        }
        for o in objects
    ]


def inventory(mgmt: TestbedClient, cluster: str, crs_name: str) -> list[str]:
    live = mgmt.get(CRS_API, "ClusterResourceSetBinding", cluster, ATTACKER) or {}
    for entry in (live.get("spec") or {}).get("bindings") or []:
        if entry["clusterResourceSetName"] == crs_name:
            return sorted(
                o["name"] for r in entry.get("resources", []) for o in r.get("objects", [])
            )
    return []


def forge(mgmt: TestbedClient, cluster: str, crs_name: str, objects: list[Obj]) -> bool:
    """Add ``objects`` to the inventory of ``crs_name``'s first resource in the
    binding (False: the controller wrote it in between; try again)."""
    live = mgmt.get(CRS_API, "ClusterResourceSetBinding", cluster, ATTACKER)
    assert live is not None
    for entry in live["spec"]["bindings"]:
        if entry["clusterResourceSetName"] == crs_name:
            entry["resources"][0]["objects"] += refs(objects)
    try:
        mgmt.update(live)
    except KubeError as exc:
        if exc.status != 409:
            raise
        return False
    return True


# --- The good tenant ----------------------------------------------------------------


@dataclass
class GoodTenant:
    mgmt: TestbedClient
    servers: list[Server]
    clients: list[TestbedClient] = field(default_factory=list)

    def populate(self) -> None:
        self.mgmt.create(source(GOOD, "good-addon", configmap("good-addon", version="0")))
        self.mgmt.create(crs(GOOD, "good", ["good-addon"], "good"))
        for i, server in enumerate(self.servers):
            real_cluster(self.mgmt, server, GOOD, f"good-{i}", {"finding": "good"})
            self.clients.append(TestbedClient(server, timeout=5))

    def close(self) -> None:
        for client in self.clients:
            client.close()

    def landed(self, version: str) -> bool:
        for client in self.clients:
            with contextlib.suppress(KubeError, OSError):
                live = client.get("v1", "ConfigMap", "good-addon", "default")
                if live and live.get("data", {}).get("version") == version:
                    continue
            return False
        return True

    def wait(self, version: str, timeout: float) -> float | None:
        """Seconds until ``version`` is on every good cluster (None: not in ``timeout``)."""
        began = time.monotonic()
        while time.monotonic() - began < timeout:
            if self.landed(version):
                return round(time.monotonic() - began, 2)
            time.sleep(0.05)
        return None

    def edit(self, version: str) -> None:
        live = self.mgmt.get("v1", "ConfigMap", "good-addon", GOOD)
        assert live is not None
        live["data"]["objects.yaml"] = yaml.safe_dump(configmap("good-addon", version=version))
        self.mgmt.update(live)

    def edits(self, timeout: float, gap: float) -> list[float | None]:
        """Five edits, each ``gap`` seconds after the previous one landed (or gave up),
        so that they spread over the attack instead of all landing in its first seconds."""
        seconds: list[float | None] = []
        for n in range(1, EDITS + 1):
            if n > 1:
                time.sleep(gap)
            began = time.monotonic()
            self.edit(str(n))
            landed = self.wait(str(n), timeout)
            seconds.append(None if landed is None else round(time.monotonic() - began, 2))
            log(f"edit {n}: {seconds[-1]} s")
        return seconds


# --- The attacker -------------------------------------------------------------------


@dataclass
class Finding:
    """One of issue 20's findings as the attacker writes it, and how to read its
    outcome: the CRS whose status must report it and how many of its clusters are
    broken (0: the finding breaks no cluster; the status must merely be written)."""

    name: str
    crs: str
    broken: int
    reported_at: float | None = None
    reason: str = ""
    message: str = ""
    extra: Figures = field(default_factory=dict)

    def figures(self) -> Figures:
        extra = {k: v for k, v in self.extra.items() if k != "crs_written_at"}
        return {
            "crs": self.crs,
            "broken_clusters": self.broken,
            "reported_after_seconds": self.reported_at,
            "reason": self.reason,
            "message": self.message,
            **extra,
        }


class Attacker:
    """Writes the findings with a client of its own (on a thread of its own)."""

    def __init__(self, plane: ControlPlane, load: Load, only: set[str]) -> None:
        self.mgmt = TestbedClient(plane.management, timeout=30)
        self.server = plane.workloads[0]
        self.load = load
        self.only = set(only)
        self.hostile: dict[str, Hostile] = {}
        self.findings: dict[str, Finding] = {}
        self.errors: dict[str, str] = {}

    def start_servers(self) -> None:
        for behaviour in ("drip", "bomb", "pages"):
            if behaviour in self.only:
                self.hostile[behaviour] = Hostile(behaviour, self.load)
                self.hostile[behaviour].start()

    def close(self) -> None:
        for server in self.hostile.values():
            server.stop()
        self.mgmt.close()

    def prepare_workload(self) -> None:
        """The other team's objects, created directly on the workload server."""
        with TestbedClient(self.server) as workload:
            workload.create(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OTHER_TEAM}}
            )
            for obj in foreign_objects():
                workload.create(obj)

    def write(self, first: threading.Event) -> None:
        """Every finding at once; ``first`` is set when all but the dependsOn tangle
        (the slowest to write) are in."""
        writers: dict[str, Callable[[], None]] = {
            "forge": self.forge,
            "bigkube": self.bigkube,
            "enckey": self.enckey,
            "drip": self.drip,
            "bomb": lambda: self.hostile_cluster("bomb"),
            "pages": lambda: self.hostile_cluster("pages"),
            "big": self.big,
            "esc": self.esc,
            "nocrd": self.nocrd,
        }
        try:
            for name, write in writers.items():
                if name in self.only:
                    self._write(name, write)
            first.set()
            if "tangle" in self.only:
                self._write("tangle", self.tangle)
        finally:
            first.set()

    def _write(self, name: str, write: Callable[[], None]) -> None:
        try:
            write()
        except (KubeError, OSError) as exc:  # reported; the other findings go on
            self.errors[name] = str(exc)[:300]
            self.only.discard(name)
            log(f"could not write {name}: {exc}")

    def _finding(self, name: str, crs_name: str, broken: int) -> None:
        self.findings[name] = Finding(name, crs_name, broken)

    def prepare_forge(self) -> None:
        """Before the attack, as any tenant: a CRS with deletionPolicy Delete applies
        two objects to a real cluster; its binding then lists them."""
        if "forge" not in self.only:
            return
        real_cluster(self.mgmt, self.server, ATTACKER, "forge", {"finding": "forge"})
        objs = (configmap("forge-keep", v="1"), configmap("forge-drop", v="1"))
        self.mgmt.create(source(ATTACKER, "forge-src", *objs))
        self.mgmt.create(crs(ATTACKER, "forge", ["forge-src"], "forge", deletionPolicy="Delete"))
        applied = functools.partial(inventory, self.mgmt, "forge", "forge")
        wait_for(lambda: applied() == ["forge-drop", "forge-keep"], 60, message="forge applied")

    def forge(self) -> None:
        """The attack: the binding's inventory gains the foreign objects, and an
        object leaves the source, so the next pass prunes from that inventory."""
        wait_for(lambda: forge(self.mgmt, "forge", "forge", foreign_objects()), 30)
        live = self.mgmt.get("v1", "ConfigMap", "forge-src", ATTACKER)
        assert live is not None
        live["data"] = source(ATTACKER, "forge-src", configmap("forge-keep", v="1"))["data"]
        self.mgmt.update(live)
        self._finding("forge", "forge", 0)

    def bigkube(self) -> None:
        config = kubeconfig(
            "big",
            {
                "server": "https://127.0.0.1:1",
                "certificate-authority-data": b64(self.server.ca_pem),
            },
            {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "/bin/true"}},
        )
        text = yaml.safe_dump(config) + "padding:\n"
        line = "- abcdefghij\n"
        text += line * ((self.load.kubeconfig_bytes - len(text)) // len(line))
        cluster_with(self.mgmt, "bigkube", "bigkube", text.encode())
        self.mgmt.create(source(ATTACKER, "plain", configmap("plain", v="1")))
        self.mgmt.create(crs(ATTACKER, "bigkube", ["plain"], "bigkube"))
        self._finding("bigkube", "bigkube", 1)

    def enckey(self) -> None:
        pair = self.server.client_cert("attacker-enc", ("system:masters",))
        key = serialization.load_pem_private_key(pair.key_pem, None)
        encrypted = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.BestAvailableEncryption(b"pass-phrase"),
        )
        user = {"client-certificate-data": b64(pair.cert_pem), "client-key-data": b64(encrypted)}
        cluster = {"server": self.server.url, "certificate-authority-data": b64(self.server.ca_pem)}
        cluster_with(
            self.mgmt, "enckey", "enckey", yaml.safe_dump(kubeconfig("e", cluster, user)).encode()
        )
        self.mgmt.create(source(ATTACKER, "enc-src", configmap("enc-obj", v="1")))
        self.mgmt.create(crs(ATTACKER, "enckey", ["enc-src"], "enckey"))
        self._finding("enckey", "enckey", 1)

    def drip(self) -> None:
        server = self.hostile["drip"]
        for i in range(self.load.drip_clusters):
            name = f"drip-{i:02d}"
            cluster_with(self.mgmt, name, "drip", yaml.safe_dump(server.kubeconfig(name)).encode())
        self.mgmt.create(source(ATTACKER, "drip-src", configmap("drip-obj", v="1")))
        self.mgmt.create(crs(ATTACKER, "drip", ["drip-src"], "drip"))
        self._finding("drip", "drip", self.load.drip_clusters)

    def hostile_cluster(self, name: str) -> None:
        """A cluster on a hostile server and a CRS that waits for health (so the
        controller LISTs what it applied, which is where ``pages`` answers)."""
        server = self.hostile[name]
        cluster_with(self.mgmt, name, name, yaml.safe_dump(server.kubeconfig(name)).encode())
        self.mgmt.create(source(ATTACKER, f"{name}-src", configmap(f"{name}-obj", v="1")))
        health = {"wait": True, "timeout": "1m"}
        self.mgmt.create(crs(ATTACKER, name, [f"{name}-src"], name, healthCheck=health))
        self._finding(name, name, 1)

    def big(self) -> None:
        """ConfigMaps of 1 MiB each: one JSON object holding a list of ``{}``."""
        names = [f"big-{i:02d}" for i in range(self.load.big_configmaps)]
        for name in names:
            head = json.dumps(configmap(f"{name}-obj"))[:-1] + ', "x": ['
            count = (1_000_000 - len(head)) // 3
            text = head + "{}," * count + "{}]}"
            self.mgmt.create(source(ATTACKER, name, text=text))
        self.mgmt.create(crs(ATTACKER, "big", names, "no-such-cluster"))
        self._finding("big", "big", 0)

    def esc(self) -> None:
        bad = configmap("esc\x1b[31mred\x1b[0m\r\nX-Injected: yes", v="1")
        real_cluster(self.mgmt, self.server, ATTACKER, "esc", {"finding": "esc"})
        self.mgmt.create(source(ATTACKER, "esc-src", configmap("esc-good", v="1"), bad))
        self.mgmt.create(crs(ATTACKER, "esc", ["esc-src"], "esc"))
        self._finding("esc", "esc", 1)

    def nocrd(self) -> None:
        widget = {
            "apiVersion": "nothere.example.com/v1",
            "kind": "Widget",
            "metadata": {"name": "widget", "namespace": "default"},
            "spec": {"size": 1},
        }
        real_cluster(self.mgmt, self.server, ATTACKER, "nocrd", {"finding": "nocrd"})
        self.mgmt.create(source(ATTACKER, "nocrd-src", configmap("nocrd-same", v="1"), widget))
        self.mgmt.create(source(ATTACKER, "nocrd-other", configmap("nocrd-other", v="1")))
        self.mgmt.create(crs(ATTACKER, "nocrd", ["nocrd-src", "nocrd-other"], "nocrd"))
        self._finding("nocrd", "nocrd", 1)

    def tangle(self) -> None:
        n = self.load.tangle
        self._finding("tangle", f"tangle-{0:03d}", 0)
        real_cluster(self.mgmt, self.server, ATTACKER, "tangle", {"finding": "tangle"})
        self.mgmt.create(source(ATTACKER, "tangle-src", configmap("tangle-obj", v="1")))
        for i in range(n):
            deps = [{"name": f"tangle-{j:03d}"} for j in range(i + 1, min(n, i + 11))]
            self.mgmt.create(
                crs(ATTACKER, f"tangle-{i:03d}", ["tangle-src"], "tangle", dependsOn=deps)
            )
        self.findings["tangle"].extra["crs_written_at"] = time.monotonic()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# --- Watching the attacker's status -------------------------------------------------


def condition(obj: Obj | None, kind: str = "Ready") -> Obj:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return {}


def reports(obj: Obj | None, broken: int) -> bool:
    """Does the status say what is wrong? With broken clusters: Ready False with a
    failure reason and all of them counted failed; without: the status is written
    for the current generation."""
    if not obj:
        return False
    status = obj.get("status") or {}
    ready = condition(obj)
    if status.get("observedGeneration") != obj["metadata"].get("generation") or not ready:
        return False
    if broken == 0:
        return True
    failed = int(status.get("failedClusters") or 0)
    return (
        ready.get("status") == "False" and ready.get("reason") not in WAITING and failed >= broken
    )


def warned(mgmt: TestbedClient, name: str) -> list[str]:
    """Warning Events on the attacker's CRS or binding called ``name``, and any
    Event of a refused deletion."""
    events = mgmt.list("v1", "Event", ATTACKER)
    return [
        f"{e.get('reason')}: {e.get('message', '')}"
        for e in events
        if (e.get("type") == "Warning" and e["involvedObject"].get("name") == name)
        or "Refused" in str(e.get("reason"))
    ]


class Watch:
    """Polls the attacker's CRS statuses from ``began`` until each finding reports
    or ``limit`` seconds have passed."""

    def __init__(self, mgmt: TestbedClient, attacker: Attacker, began: float, limit: float) -> None:
        self.mgmt = mgmt
        self.attacker = attacker
        self.began = began
        self.limit = limit
        self.passes = 0
        self.slowest = (0.0, 0.0)  # (seconds a pass took, when it began)

    def run(self, written: threading.Event) -> None:
        """Every 0.5 s a GET of each pending finding's CRS (the tangle's 800: one
        LIST every 5 s); how long each pass took is kept, as it bounds the timing."""
        written.wait()
        passes = 0
        while time.monotonic() - self.began < self.limit and self._awaited():
            began = time.monotonic()
            pending = [f for f in self.attacker.findings.values() if f.reported_at is None]
            for finding in pending:
                if finding.name != "tangle" or passes % 10 == 0:
                    with contextlib.suppress(KubeError, OSError):
                        self.check(finding)
            took = time.monotonic() - began
            self.slowest = max(self.slowest, (round(took, 2), round(began - self.began, 1)))
            passes += 1
            time.sleep(max(0.0, 0.5 - took))
        self.passes = passes

    def _awaited(self) -> set[str]:
        return {
            n
            for n in list(self.attacker.only)
            if n not in self.attacker.findings or self.attacker.findings[n].reported_at is None
        }

    def check(self, finding: Finding) -> None:
        if finding.name == "tangle":
            self.check_tangle(finding)
            return
        obj = self.mgmt.get(CRS_API, "ClusterResourceSet", finding.crs, ATTACKER)
        if finding.name == "forge":
            events = warned(self.mgmt, "forge")
            if events or (reports(obj, 1)):
                self._reported(finding, obj, events)
            return
        if reports(obj, finding.broken):
            self._reported(finding, obj, [])

    def _reported(self, finding: Finding, obj: Obj | None, events: list[str]) -> None:
        ready = condition(obj)
        finding.reported_at = round(time.monotonic() - self.began, 1)
        finding.reason = str(ready.get("reason", ""))
        finding.message = str(ready.get("message", ""))[:400]
        if events:  # the forged entry: the Event is the report, the status reads Applied
            finding.reason = f"{events[0].split(':', 1)[0]} (Event; status {finding.reason})"
            finding.extra["warning_events"] = [e[:300] for e in events[:3]]
        log(f"{finding.name}: {finding.reason} after {finding.reported_at} s")

    def check_tangle(self, finding: Finding) -> None:
        if "crs_written_at" not in finding.extra:
            return
        items = self.mgmt.list(CRS_API, "ClusterResourceSet", ATTACKER, label_selector=None)
        tangle = [i for i in items if i["metadata"]["name"].startswith("tangle-")]
        done = [i for i in tangle if reports(i, 0)]
        finding.extra["statuses_written"] = len(done)
        if len(done) == len(tangle) == self.attacker.load.tangle:
            finding.reported_at = round(time.monotonic() - self.began, 1)
            reasons = Counter(condition(i).get("reason", "") for i in tangle)
            finding.reason = ", ".join(f"{r} x{c}" for r, c in reasons.most_common())
            log(f"tangle: every status written after {finding.reported_at} s")


# --- Checks at the end --------------------------------------------------------------


def foreign_alive(server: Server) -> dict[str, bool]:
    with TestbedClient(server) as workload:
        return {
            f"{o['kind']} {o['metadata']['namespace']}/{o['metadata']['name']}": workload.get(
                o["apiVersion"], o["kind"], o["metadata"]["name"], o["metadata"]["namespace"]
            )
            is not None
            for o in foreign_objects()
        }


def workload_deletes(plane: ControlPlane, since: float) -> list[str]:
    """Every DELETE the controller sent to a workload server, from the audit logs."""
    found = []
    stamp = datetime.datetime.fromtimestamp(since, datetime.UTC)
    for server in plane.workloads:
        for event in server.audit_events():
            if event["verb"] != "delete" or event["user"]["username"] not in (
                ATTACKER_USER,
                GOOD_USER,
            ):
                continue
            received = datetime.datetime.fromisoformat(
                event["requestReceivedTimestamp"].replace("Z", "+00:00")
            )
            if received >= stamp:
                ref = event.get("objectRef") or {}
                where = f"{ref.get('namespace', '')}/{ref.get('name')}"
                found.append(f"{server.name}: {ref.get('resource')} {where}")
    return found


def control_characters(mgmt: TestbedClient) -> list[str]:
    """Where a control character reached the attacker's CRS statuses, bindings or Events."""
    parts: tuple[tuple[str, str, Callable[[Obj], Any]], ...] = (
        (CRS_API, "ClusterResourceSet", lambda o: o.get("status")),
        (CRS_API, "ClusterResourceSetBinding", lambda o: o.get("spec")),
        ("v1", "Event", lambda o: [o.get("reason"), o.get("message")]),
    )
    found = []
    for api_version, kind, part in parts:
        for obj in mgmt.list(api_version, kind, ATTACKER):
            if any(CONTROL.search(text) for text in _strings(part(obj))):
                found.append(f"{kind} {obj['metadata']['name'][:60]}")
    return found


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def on_workload(server: Server, names: list[str]) -> dict[str, bool]:
    """Which of the ConfigMaps ``names`` (in default) exist on ``server``."""
    with TestbedClient(server) as workload:
        return {n: workload.get("v1", "ConfigMap", n, "default") is not None for n in names}


def final_checks(
    mgmt: TestbedClient, plane: ControlPlane, attacker: Attacker, began: float
) -> Figures:
    server = plane.workloads[0]
    checks: Figures = {
        "foreign_objects_present": foreign_alive(server),
        "controller_deletes_on_workloads": workload_deletes(plane, began),
        "control_characters_in": control_characters(mgmt),
    }
    if "forge" in attacker.findings:  # forge-drop gone: the controller did prune
        attacker.findings["forge"].extra["applied"] = on_workload(
            server, ["forge-keep", "forge-drop"]
        )
    if "esc" in attacker.findings:
        attacker.findings["esc"].extra["applied"] = on_workload(server, ["esc-good"])
    if "nocrd" in attacker.findings:
        attacker.findings["nocrd"].extra["applied"] = on_workload(
            server, ["nocrd-same", "nocrd-other"]
        )
    checks["attacker_write_errors"] = attacker.errors
    events = attacker.mgmt.list("v1", "Event", ATTACKER)
    checks["attacker_events"] = dict(
        Counter(
            f"{e.get('type')} {e.get('reason')} on {e['involvedObject'].get('kind')}"
            f" {e['involvedObject'].get('name', '')[:40]}"
            for e in events
        ).most_common(30)
    )
    for name, hostile in attacker.hostile.items():
        attacker.findings[name].extra["requests_seen"] = dict(hostile.requests.most_common(8))
    return checks


# --- Objectives ---------------------------------------------------------------------


def objective(name: str, target: str, value: Any, passed: bool) -> Figures:
    return {"objective": name, "target": target, "value": value, "pass": bool(passed)}


def objectives(result: Figures, limit_mib: float) -> list[Figures]:
    return shared_objectives(result, limit_mib) + finding_objectives(result["findings"])


def shared_objectives(result: Figures, limit_mib: float) -> list[Figures]:
    """What the other tenant, the probes and the workload servers must see."""
    edits = result["good_tenant"]["edit_seconds"]
    slowest = None if None in edits or not edits else max(edits)
    health, memory = result["healthz"], result["memory"]
    peak = max(memory["vm_hwm_mib"] or 0.0, memory["peak_mib"])
    checks = result["checks"]
    out = [
        objective(
            "every good edit on all its clusters",
            f"<= {OBJECTIVES['edit_seconds']} s",
            slowest,
            slowest is not None and len(edits) == EDITS and slowest <= OBJECTIVES["edit_seconds"],
        ),
        objective(
            "/healthz latency (max)",
            f"<= {OBJECTIVES['healthz_seconds']} s",
            health["max_seconds"],
            health["max_seconds"] <= OBJECTIVES["healthz_seconds"],
        ),
        objective(
            "/healthz failures",
            "0",
            health["failures"],
            health["failures"] == 0 and health["samples"] > 0,
        ),
        objective(
            "controller RSS (peak: VmHWM, or the highest sample if it was killed)",
            f"< {limit_mib:g} MiB",
            peak,
            memory["killed_at_seconds"] is None and 0 < peak < limit_mib,
        ),
        objective(
            "foreign objects still exist, once the forged inventory was pruned from",
            "all",
            checks["foreign_objects_present"],
            all(checks["foreign_objects_present"].values()) and forge_looked(result),
        ),
        objective(
            "no control characters in status, Events, bindings",
            "none",
            checks["control_characters_in"],
            not checks["control_characters_in"],
        ),
    ]
    return out


def finding_objectives(findings: Figures) -> list[Figures]:
    """Each finding reported in time; an object-level failure stays object-level."""
    out = []
    for name, finding in findings.items():
        at = finding["reported_after_seconds"]
        where = "a Warning Event" if name == "forge" else "its CRS status"
        out.append(
            objective(
                f"{name}: reported on {where}",
                f"<= {OBJECTIVES['report_seconds']:g} s",
                at,
                at is not None and at <= OBJECTIVES["report_seconds"],
            )
        )
    for name, wanted in (("esc", ["esc-good"]), ("nocrd", ["nocrd-same", "nocrd-other"])):
        if name in findings:
            finding = findings[name]
            applied = finding.get("applied", {})
            out.append(
                objective(
                    f"{name}: object-level ApplyFailed, the rest applied",
                    "ApplyFailed and " + ", ".join(wanted),
                    [finding["reason"], applied],
                    finding["reason"] == "ApplyFailed" and all(applied.get(w) for w in wanted),
                )
            )
    return out


def forge_looked(result: Figures) -> bool:
    """Did the controller prune from the forged inventory (the object that left the
    source is gone)? Until then, foreign objects still existing proves nothing."""
    forge = result["findings"].get("forge")
    if forge is None:
        return True  # not written in this run
    return forge.get("applied", {}).get("forge-drop") is False


# --- The run ------------------------------------------------------------------------


def setup(mgmt: TestbedClient, plane: ControlPlane) -> None:
    crds = sorted((REPO / "config" / "crd" / "bases").glob("*.yaml"))
    crds += sorted((REPO / "config" / "testing").glob("*.yaml"))
    install_crds(mgmt, crds)
    warm_up(mgmt, crds)
    install_rbac(mgmt)
    for ns in (GOOD, ATTACKER):
        mgmt.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})


def controller_defaults(args: list[str]) -> Figures:
    """--concurrency and --workload-timeout as the CLI's own parser resolves ``args``
    (its defaults: the Deployment sets neither)."""
    from crs_controller.app import cli  # noqa: PLC0415 - only for the flags' defaults

    built: Any = cli._parser()
    parser = built[0] if isinstance(built, tuple) else built  # (parser, subparsers) lately
    parsed = parser.parse_args(["run", *args])
    return {"concurrency": parsed.concurrency, "workload_timeout_seconds": parsed.workload_timeout}


@dataclass
class Run:
    args: argparse.Namespace
    load: Load
    only: set[str]
    result: Figures = field(default_factory=dict)

    def measure(self, plane: ControlPlane, mgmt: TestbedClient) -> None:
        manager_args, limit = deployment()
        self.result["controller"] = {
            "args": manager_args,
            **controller_defaults(manager_args),
            "memory_limit_mib": limit,
            "stdin": "a pipe that stays open and silent; no terminal",
        }
        setup(mgmt, plane)
        good = GoodTenant(mgmt, plane.workloads[: self.args.good_clusters])
        attacker = Attacker(plane, self.load, self.only)
        controller = ControllerProcess(
            plane.management,
            *manager_args,
            env={"POD_NAME": "crs-controller-bench"},
            stdin=subprocess.PIPE,
        )
        try:
            good.populate()
            attacker.prepare_workload()
            attacker.start_servers()
            self.under_attack(plane, mgmt, controller, good, attacker)
        finally:
            controller.close()
            attacker.close()
            good.close()

    def under_attack(
        self,
        plane: ControlPlane,
        mgmt: TestbedClient,
        controller: ControllerProcess,
        good: GoodTenant,
        attacker: Attacker,
    ) -> None:
        started = time.time()
        controller.start()
        assert controller.pid is not None
        pid = controller.pid
        health = HealthProbe(controller.url("/healthz"))
        memory = MemoryProbe(pid, controller.kill, self.args.rss_abort_mib)
        health.start()
        memory.start()
        try:
            ready = round(time.time() - started, 2)
            landed = good.wait("0", 60)
            first = None if landed is None else round(time.time() - started, 2)
            self.result["good_tenant"] = {
                "clusters": len(good.servers),
                "ready_seconds": ready,
                "first_apply_seconds": first,  # from the spawn, as in scale.py
            }
            attacker.prepare_forge()
            log(f"good tenant's first apply: {first} s; the attacker writes")
            self.attack(plane, good, attacker)
            hwm = vm_kib(pid, "VmHWM")  # 0 once the process is gone (killed past the limit)
            self.result["memory"] = {"vm_hwm_mib": round(hwm / 1024, 1) if hwm else None}
            self.result["checks"] = final_checks(mgmt, plane, attacker, started)
        finally:
            health.stop()
            memory.stop()
            self.result["healthz"] = health.figures(OBJECTIVES["healthz_seconds"])
            self.result.setdefault("memory", {}).update(memory.figures())
            self.result["findings"] = {n: f.figures() for n, f in attacker.findings.items()}
            self.result["controller"]["exit_code"] = controller.stop()
            self.result["controller"]["log_tail"] = controller.log_tail(5).splitlines()

    def attack(self, plane: ControlPlane, good: GoodTenant, attacker: Attacker) -> None:
        began = time.monotonic()
        written = threading.Event()
        writer = threading.Thread(target=attacker.write, args=(written,), daemon=True)
        writer.start()
        # The watch reads with a client of its own: the edits must not wait behind it.
        with TestbedClient(plane.management, timeout=30) as reader:
            watch = Watch(reader, attacker, began, OBJECTIVES["report_seconds"] + 10)
            watcher = threading.Thread(target=watch.run, args=(written,), daemon=True)
            watcher.start()
            self.edits(good, began, written)
            writer.join()
            watcher.join()
        self.result["status_watch"] = {
            "passes": watch.passes,
            "slowest_pass_seconds": watch.slowest[0],
            "slowest_pass_began_at": watch.slowest[1],
        }
        self.result["attack_seconds"] = round(time.monotonic() - began, 1)

    def edits(self, good: GoodTenant, began: float, written: threading.Event) -> None:
        written.wait()
        self.result["attacker_written_seconds"] = round(time.monotonic() - began, 1)
        log(
            f"attacker's objects written in {self.result['attacker_written_seconds']} s; good edits"
        )
        edits = good.edits(self.args.edit_timeout, self.args.edit_gap)
        self.result["good_tenant"]["edit_seconds"] = edits


def _cell(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}: {v}" for k, v in value.items()) or "none"
    if isinstance(value, list):
        return " ".join(_cell(v) for v in value) or "none"
    return str(value)


def markdown(result: Figures) -> str:
    """The objectives as a table for the README, with the machine and the commit."""
    m = result["machine"]
    lines = [
        f"Measured on {m['nproc']} CPUs ({m['cpu_model']}), {m['memory_mib'] / 1024:.0f} GiB,"
        f" Linux {m['kernel']}, Python {m['python']}, kube-apiserver"
        f" {result.get('kubernetes', '?')}; commit {result['git']['commit'][:7]}.",
        "",
        "| objective | target | measured | |",
        "|---|---|---|---|",
    ]
    for o in result.get("objectives", []):
        verdict = "pass" if o["pass"] else "**fail**"
        lines.append(f"| {o['objective']} | {o['target']} | {_cell(o['value'])} | {verdict} |")
    good, health, memory = result["good_tenant"], result["healthz"], result["memory"]
    lines += [
        "",
        f"Good tenant's edits: {_cell(good['edit_seconds'])} s. /healthz: max"
        f" {health['max_seconds']} s, p99 {health['p99_seconds']} s over {health['samples']}"
        f" probes, {health['failures']} failed. RSS: {memory['start_mib']} MiB at start, peak"
        f" {memory['peak_mib']} MiB (VmHWM {memory['vm_hwm_mib']} MiB).",
        "",
        "| finding | reported after (s) | reason |",
        "|---|---|---|",
    ]
    for name, f in result["findings"].items():
        lines.append(f"| {name} | {f['reported_after_seconds']} | {f['reason'] or '-'} |")
    return "\n".join(lines) + "\n"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json-out", type=Path, help="also write the JSON to this file")
    parser.add_argument("--markdown", type=Path, help="write the objectives as a table here")
    parser.add_argument("--quick", action="store_true", help=f"fewer attacker objects: {QUICK}")
    parser.add_argument(
        "--only", nargs="+", choices=FINDINGS, default=list(FINDINGS), help="findings to write"
    )
    parser.add_argument("--good-clusters", type=int, default=3, help="one workload server each")
    parser.add_argument(
        "--edit-timeout", type=float, default=30.0, help="give up on an edit after this long"
    )
    parser.add_argument(
        "--edit-gap", type=float, default=8.0, help="seconds between an edit landing and the next"
    )
    parser.add_argument(
        "--rss-abort-mib",
        type=float,
        default=3072.0,
        help="kill the controller past this RSS (keeps the machine usable)",
    )
    parser.add_argument("--drip-clusters", type=int, help="override the load's count")
    parser.add_argument("--tangle", type=int, help="override the load's dependsOn CRSs")
    parser.add_argument("--big-configmaps", type=int, help="override the load's 1 MiB sources")
    args = parser.parse_args()
    if args.good_clusters < 1:
        parser.error("--good-clusters must be at least 1")
    return args


def main() -> None:
    args = parse_args()
    load = QUICK if args.quick else Load()
    overrides = {
        "drip_clusters": args.drip_clusters,
        "tangle": args.tangle,
        "big_configmaps": args.big_configmaps,
    }
    load = dataclasses.replace(load, **{k: v for k, v in overrides.items() if v is not None})
    run = Run(args, load, set(args.only))
    run.result |= {"machine": machine(), "git": git_state(), "load": asdict(load)}
    run.result["findings_written"] = [f for f in FINDINGS if f in args.only]
    began = time.monotonic()
    try:
        with ControlPlane.start(workloads=args.good_clusters) as plane:
            run.result["kubernetes"] = plane.version
            with TestbedClient(plane.management, timeout=30) as mgmt:
                run.measure(plane, mgmt)
    except (RuntimeError, TimeoutError, KubeError, OSError) as exc:
        log(f"failed: {exc}")
        run.result["error"] = str(exc)[:2000]
    run.result["duration_seconds"] = round(time.monotonic() - began, 1)
    limit = run.result.get("controller", {}).get("memory_limit_mib", 512.0)
    if "error" not in run.result:
        run.result["objectives"] = objectives(run.result, limit)
        run.result["passed"] = all(o["pass"] for o in run.result["objectives"])
    text = json.dumps(run.result, indent=2)
    print(text)
    if args.json_out:
        args.json_out.write_text(text + "\n")
    if args.markdown and "objectives" in run.result:
        args.markdown.write_text(markdown(run.result))
    if not run.result.get("passed"):
        sys.exit(1)


if __name__ == "__main__":
    main()

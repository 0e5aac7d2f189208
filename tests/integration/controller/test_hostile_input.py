"""Hostile and careless input on real servers, one test per finding of the security
review: a workload kubeconfig that asks to run a command, read or delete local files,
fall back to the controller's own identity, use a proxy or name a server whose host is
not ASCII is refused (``UnsupportedKubeconfig``, naming the field, never its value); a
YAML alias bomb is ``InvalidManifest`` while another namespace's CRS converges (the
controller's memory meanwhile is a figure of hack/bench/parsing.py); a server that is
not a Kubernetes API fails only its cluster and the CRS status is still written;
server messages about objects from a resource-set Secret never quote them; a lost
ApplyOnce inventory is re-adopted so Delete still deletes; and a standby replica never
answers BeforeClusterDelete with 0 while cleanup is pending."""

from __future__ import annotations

import http.server
import threading
import uuid
from pathlib import Path
from typing import Any

from crs_controller.testbed import TestbedClient, wait_for
from crs_controller.testbed.certs import CertificateAuthority
from crs_controller.testbed.controller import ControllerProcess

from .hostile import add_cluster_with_kubeconfig, hostile_server, kubeconfig, pem_b64
from .support import (
    CLUSTER_API,
    CRS_API,
    HOLD,
    TIMEOUT,
    add_cluster,
    binding,
    binding_entry,
    condition,
    configmap_obj,
    crs_obj,
    hook,
    job,
    manifests,
    source_configmap,
    source_secret,
    unique,
    wait_condition,
    wait_object,
)

Obj = dict[str, Any]


# --- 1, 2, 3: kubeconfigs that ask for too much -------------------------------------

CA = CertificateAuthority.generate("hostile-test-ca")
SERVER = {"server": "https://127.0.0.1:1", "certificate-authority-data": pem_b64(CA.cert_pem)}
VALUE_MARKER = "v4lue-" + uuid.uuid4().hex[:12]


def refusals(tmp: Path, marker: Path) -> list[tuple[str, Obj, str]]:
    """(case, kubeconfig, the field its message must name)."""
    exec_plugin = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": "/bin/sh",
        "args": ["-c", f'touch {marker}; echo \'{{"status": {{"token": "{VALUE_MARKER}"}}}}\''],
    }
    victim = str(tmp / "victim.pem")
    ca_data = SERVER["certificate-authority-data"]
    proxy = f"http://{VALUE_MARKER}.invalid:3128"
    return [
        ("exec", kubeconfig(SERVER, {"exec": exec_plugin}), "users[0].user.exec"),
        (
            "auth-provider",
            kubeconfig(SERVER, {"auth-provider": {"name": "oidc", "config": {}}}),
            "users[0].user.auth-provider",
        ),
        (
            "token-file",
            kubeconfig(SERVER, {"tokenFile": str(tmp / "token")}),
            "users[0].user.tokenFile",
        ),
        (
            "cert-path",
            kubeconfig(SERVER, {"client-certificate": victim, "client-key": victim}),
            "users[0].user.client-certificate",
        ),
        (
            "ca-path",
            kubeconfig({"server": "https://127.0.0.1:1", "certificate-authority": victim}, {}),
            "clusters[0].cluster.certificate-authority",
        ),
        (
            "no-server",
            kubeconfig({"certificate-authority-data": ca_data}, {"token": VALUE_MARKER}),
            "clusters[0].cluster.server",
        ),
        (
            "plain-http",
            kubeconfig({"server": "http://127.0.0.1:1"}, {"token": VALUE_MARKER}),
            "clusters[0].cluster.server",
        ),
        (
            "proxy",
            kubeconfig({**SERVER, "proxy-url": proxy}, {"token": "t"}),
            "clusters[0].cluster.proxy-url",
        ),
        (
            "unicode-host",
            kubeconfig({**SERVER, "server": f"https://{VALUE_MARKER}-ü.example"}, {"token": "t"}),
            "clusters[0].cluster.server",
        ),
    ]


def test_kubeconfigs_that_ask_for_too_much_are_refused_naming_the_field(
    controller: ControllerProcess, mgmt: TestbedClient, namespace: str
) -> None:
    tmp = controller.tmpdir
    victim = tmp / "victim.pem"
    victim.write_bytes(CA.cert_pem)  # a readable "certificate" the controller must not use
    marker = tmp / f"ran-{uuid.uuid4().hex[:8]}"
    cases = refusals(tmp, marker)
    mgmt.create(source_configmap(namespace, "a", {"a": manifests(configmap_obj(unique("k")))}))
    for case, config, _ in cases:
        add_cluster_with_kubeconfig(mgmt, namespace, case, {"case": case}, config)
        mgmt.create(crs_obj(namespace, case, [("ConfigMap", "a")], {"case": case}))
    for case, _, field in cases:
        cond = wait_condition(mgmt, namespace, case, "Ready", "False", "UnsupportedKubeconfig")
        assert field in cond["message"], (case, cond["message"])
        assert VALUE_MARKER not in cond["message"]
        assert str(tmp) not in cond["message"]
    assert not marker.exists(), "the exec plugin ran"
    assert victim.exists(), "a file named by a kubeconfig was deleted"

    def warned() -> set[str]:
        events = mgmt.list("v1", "Event", namespace)
        return {
            e["involvedObject"]["name"] for e in events if e["reason"] == "UnsupportedKubeconfig"
        }

    wait_for(lambda: warned() == {case for case, _, _ in cases}, TIMEOUT, message="events")
    assert all(VALUE_MARKER not in e["message"] for e in mgmt.list("v1", "Event", namespace))
    assert VALUE_MARKER not in controller.log_text()


# --- 4: a YAML alias bomb ----------------------------------------------------------


def alias_bomb(levels: int = 9) -> str:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for n in range(1, levels):
        lines.append(f"a{n}: &a{n} [" + ",".join([f"*a{n - 1}"] * 9) + "]")
    body = "\n".join("  " + line for line in lines)
    return f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bomb\nbomb:\n{body}\n"


def test_an_alias_bomb_is_invalid_and_nobody_else_waits(
    controller: ControllerProcess, mgmt: TestbedClient, workloads, workload_clients, namespace: str
) -> None:
    other_ns = unique("other")
    mgmt.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other_ns}})
    try:
        mgmt.create(source_configmap(namespace, "bomb", {"bomb.yaml": alias_bomb()}))
        add_cluster(mgmt, workloads[0], namespace, "bombed", {"bomb": "1"})
        mgmt.create(crs_obj(namespace, "bomb", [("ConfigMap", "bomb")], {"bomb": "1"}))
        good = unique("good")
        mgmt.create(source_configmap(other_ns, "g", {"a": manifests(configmap_obj(good))}))
        add_cluster(mgmt, workloads[1], other_ns, "fine", {"fine": "1"})
        mgmt.create(crs_obj(other_ns, "g", [("ConfigMap", "g")], {"fine": "1"}))

        cond = wait_condition(mgmt, namespace, "bomb", "Ready", "False", "InvalidManifest")
        assert "alias" in cond["message"], cond["message"]
        wait_object(workload_clients[1], "v1", "ConfigMap", good, "default")
        wait_condition(mgmt, other_ns, "g", "Ready", "True", "Applied")
    finally:
        mgmt.delete("v1", "Namespace", other_ns)


# --- 5: a server that is not a Kubernetes API ---------------------------------------


def html(handler: http.server.BaseHTTPRequestHandler, done: threading.Event) -> None:
    """Every request answered with 200 and an HTML page."""
    body = b"<html><body>Welcome to nginx!</body></html>"
    handler.send_response(200)
    handler.send_header("Content-Type", "text/html")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def test_a_server_that_is_not_kubernetes_fails_alone_and_status_is_written(
    controller: ControllerProcess, mgmt: TestbedClient, workloads, workload_clients, namespace: str
) -> None:
    name = unique("html")
    mgmt.create(source_configmap(namespace, "h", {"a": manifests(configmap_obj(name))}))
    with hostile_server(html) as (port, ca_pem):
        config = kubeconfig(
            {"server": f"https://127.0.0.1:{port}", "certificate-authority-data": pem_b64(ca_pem)},
            {"token": "t"},
        )
        add_cluster_with_kubeconfig(mgmt, namespace, "nginx", {"h": "1"}, config)
        add_cluster(mgmt, workloads[2], namespace, "real", {"h": "1"})
        mgmt.create(crs_obj(namespace, "h", [("ConfigMap", "h")], {"h": "1"}))
        wait_object(workload_clients[2], "v1", "ConfigMap", name, "default")

        def written() -> Obj | None:
            crs = mgmt.get(CRS_API, "ClusterResourceSet", "h", namespace) or {}
            status = crs.get("status") or {}
            done = status.get("appliedClusters") == 1 and status.get("failedClusters") == 1
            return crs if done else None

        crs = wait_for(written, TIMEOUT, message="status with one applied, one failed cluster")
    ready = condition(crs, "Ready")
    assert ready is not None and ready["reason"] == "ClusterUnreachable"
    assert "nginx" in ready["message"]
    assert "did not answer as a Kubernetes API server" in ready["message"]


# --- 6: server messages about objects from a resource-set Secret --------------------


def test_server_messages_about_objects_from_a_secret_are_reduced_to_field_and_reason(
    controller: ControllerProcess, mgmt: TestbedClient, workloads, namespace: str
) -> None:
    bad = configmap_obj(unique("labelled"))
    bad["metadata"]["labels"] = {"tier": f"{VALUE_MARKER}!!not-a-label"}
    mgmt.create(source_secret(namespace, "s", {"a": manifests(bad)}))
    add_cluster(mgmt, workloads[0], namespace, "sec", {"sec": "1"})
    mgmt.create(crs_obj(namespace, "s", [("Secret", "s")], {"sec": "1"}))
    cond = wait_condition(mgmt, namespace, "s", "Ready", "False", "ApplyFailed")
    assert "metadata.labels" in cond["message"], cond["message"]
    assert VALUE_MARKER not in cond["message"]

    def warning() -> list[Obj]:
        events = mgmt.list("v1", "Event", namespace)
        return [e for e in events if e["reason"] == "ApplyFailed"]

    events = wait_for(warning, TIMEOUT, message="ApplyFailed event")
    assert all(VALUE_MARKER not in e["message"] for e in events)
    assert VALUE_MARKER not in controller.log_text()
    # Otherwise it is retried with backoff for the rest of the session.
    mgmt.delete(CRS_API, "ClusterResourceSet", "s", namespace)


# --- 7: a lost ApplyOnce inventory --------------------------------------------------


def test_a_lost_apply_once_inventory_is_readopted_and_delete_still_deletes(
    controller: ControllerProcess, mgmt: TestbedClient, workloads, workload_clients, namespace: str
) -> None:
    name = unique("adopt")
    mgmt.create(source_configmap(namespace, "o", {"a": manifests(configmap_obj(name))}))
    add_cluster(mgmt, workloads[1], namespace, "lost", {"lost": "1"})
    crs = crs_obj(namespace, "o", [("ConfigMap", "o")], {"lost": "1"}, deletionPolicy="Delete")
    mgmt.create(crs)
    wait_condition(mgmt, namespace, "o", "Ready", "True", "Applied")
    before = binding(mgmt, namespace, "lost")
    assert before is not None

    mgmt.delete(CRS_API, "ClusterResourceSetBinding", "lost", namespace)

    def rebuilt() -> Obj | None:
        found = binding(mgmt, namespace, "lost")
        if found is None or found["metadata"]["uid"] == before["metadata"]["uid"]:
            return None
        entry = binding_entry(mgmt, namespace, "lost", "o")
        return entry if entry and entry["resources"] else None

    entry = wait_for(rebuilt, TIMEOUT, message="binding rebuilt")
    objects = entry["resources"][0].get("objects") or []
    assert [o["name"] for o in objects] == [name]

    mgmt.delete(CRS_API, "ClusterResourceSet", "o", namespace)
    wait_for(
        lambda: workload_clients[1].get("v1", "ConfigMap", name, "default") is None,
        TIMEOUT,
        message="the re-adopted object deleted with its CRS",
    )


# --- 8: a standby replica and BeforeClusterDelete ------------------------------------


def test_a_standby_replica_never_releases_a_deletion_that_still_needs_cleanup(
    controller: ControllerProcess,
    mgmt: TestbedClient,
    workloads,
    namespace: str,
    foreign_lease: None,
) -> None:
    addon, drain = unique("addon"), unique("drain")
    mgmt.create(source_configmap(namespace, "addon", {"a": manifests(configmap_obj(addon))}))
    mgmt.create(source_configmap(namespace, "drain", {"a": manifests(job(drain))}))
    crs = crs_obj(namespace, "un", [("ConfigMap", "addon")], {"sb": "1"}, mode="Reconcile")
    crs["spec"]["uninstall"] = {
        "ensure": True,
        "timeout": "10m",
        "beforeDelete": [{"kind": "ConfigMap", "name": "drain"}],
    }
    mgmt.create(crs)
    add_cluster(mgmt, workloads[0], namespace, "sb", {"sb": "1"})
    patch = {"metadata": {"finalizers": [HOLD]}, "spec": {"topology": {"class": "demo"}}}
    mgmt.patch_merge(CLUSTER_API, "Cluster", "sb", patch, namespace=namespace)
    wait_condition(mgmt, namespace, "un", "Ready", "True", "Applied")
    mgmt.delete(CLUSTER_API, "Cluster", "sb", namespace)
    cluster = wait_object(
        mgmt,
        CLUSTER_API,
        "Cluster",
        "sb",
        namespace,
        lambda c: "deletionTimestamp" in c["metadata"],
    )
    # The session's controller holds the deletion: its hook Job never completes here.
    assert hook(controller, cluster)["retryAfterSeconds"] > 0

    with ControllerProcess(controller.management, "--leader-elect", extension=True) as standby:
        assert "became leader" not in standby.log_text()
        answer = hook(standby, cluster)
        assert answer["status"] == "Success"
        assert answer["retryAfterSeconds"] > 0, answer
        assert "un" in answer["message"]
    mgmt.patch_merge(
        CLUSTER_API, "Cluster", "sb", {"metadata": {"finalizers": None}}, namespace=namespace
    )

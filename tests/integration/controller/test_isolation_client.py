"""What one workload server can cost the controller, on the real servers: a custom
resource whose CRD is not installed fails alone (its resource ApplyFailed, every other
resource applied on the same cluster); a server dripping its answer a byte at a time
fails its cluster at one request's deadline (``--workload-timeout``, 15 s), not the
reconcile's 300 s; answers that would decode to gigabytes (many bytes, or a few MiB
of ``{}``) are refused before decoding and the cluster says why (the controller's
memory meanwhile is a figure of hack/bench/parsing.py); an encrypted client key is
refused, never prompted for.

Hostile workload servers are small TLS servers on loopback started by the test."""

from __future__ import annotations

import base64
import contextlib
import http.server
import socket
import threading
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from crs_controller.testbed import TestbedClient, wait_for
from crs_controller.testbed.certs import CertificateAuthority
from crs_controller.testbed.controller import ControllerProcess

from .hostile import Respond, add_cluster_with_kubeconfig, hostile_server, kubeconfig, pem_b64
from .support import (
    CRS_API,
    TIMEOUT,
    add_cluster,
    binding_entry,
    configmap_obj,
    crs_obj,
    manifests,
    source_configmap,
    unique,
    wait_condition,
    wait_object,
)

Obj = dict[str, Any]
WORKLOAD_TIMEOUT = 15.0  # the controller's default --workload-timeout


def token_kubeconfig(port: int, ca_pem: bytes) -> Obj:
    server = {"server": f"https://127.0.0.1:{port}", "certificate-authority-data": pem_b64(ca_pem)}
    return kubeconfig(server, {"token": "t"})


def failure(mgmt: TestbedClient, namespace: str, crs: str, cluster: str) -> Obj | None:
    """The failed outcome recorded for ``cluster`` in its binding, once there is one."""
    entry = binding_entry(mgmt, namespace, cluster, crs)
    if entry is None or entry.get("outcome", {}).get("reason") in (None, "Applied"):
        return None
    return dict(entry["outcome"])


# --- a CRD that is not installed ----------------------------------------------------


def test_a_kind_whose_crd_is_not_installed_fails_alone(
    controller: ControllerProcess, mgmt: TestbedClient, workloads, workload_clients, namespace: str
) -> None:
    beside, other = unique("beside"), unique("other")
    custom = {
        "apiVersion": "missing.example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": "default"},
        "spec": {"size": 1},
    }
    mgmt.create(source_configmap(namespace, "a", {"a": manifests(custom, configmap_obj(beside))}))
    mgmt.create(source_configmap(namespace, "b", {"b": manifests(configmap_obj(other))}))
    add_cluster(mgmt, workloads[1], namespace, "nocrd", {"nocrd": "1"})
    mgmt.create(crs_obj(namespace, "crd", [("ConfigMap", "a"), ("ConfigMap", "b")], {"nocrd": "1"}))

    wait_object(workload_clients[1], "v1", "ConfigMap", other, "default")
    wait_object(workload_clients[1], "v1", "ConfigMap", beside, "default")
    cond = wait_condition(mgmt, namespace, "crd", "Ready", "False", "ApplyFailed")
    assert "Widget" in cond["message"] and "missing.example.com/v1" in cond["message"]
    assert "CRD installed" in cond["message"], cond["message"]
    entry = binding_entry(mgmt, namespace, "nocrd", "crd")
    assert entry is not None
    applied = {r["name"]: r.get("applied") for r in entry["resources"]}
    assert applied == {"a": False, "b": True}, entry
    assert entry["outcome"]["reason"] != "ClusterUnreachable", entry
    mgmt.delete(CRS_API, "ClusterResourceSet", "crd", namespace)  # else retried all session


# --- a server that drips its answer -------------------------------------------------


def drip(handler: http.server.BaseHTTPRequestHandler, done: threading.Event) -> None:
    """A 200 whose 1000-byte body comes a byte every 2 s: each read is quick enough."""
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", "1000")
    handler.end_headers()
    for _ in range(1000):
        if done.wait(2):
            return
        handler.wfile.write(b" ")
        handler.wfile.flush()


def test_a_server_dripping_its_answer_fails_its_cluster_within_one_request_deadline(
    controller: ControllerProcess, mgmt: TestbedClient, namespace: str
) -> None:
    mgmt.create(source_configmap(namespace, "d", {"a": manifests(configmap_obj(unique("d")))}))
    with hostile_server(drip) as (port, ca_pem):
        config = token_kubeconfig(port, ca_pem)
        add_cluster_with_kubeconfig(mgmt, namespace, "drip", {"drip": "1"}, config)
        mgmt.create(crs_obj(namespace, "d", [("ConfigMap", "d")], {"drip": "1"}))
        outcome = wait_for(
            lambda: failure(mgmt, namespace, "d", "drip"),
            WORKLOAD_TIMEOUT + TIMEOUT,
            message="a failure outcome for the dripping cluster",
        )
    assert outcome["reason"] == "ClusterUnreachable", outcome
    # Ended by one request's deadline, not by the reconcile's 300 s.
    assert f"no complete answer within {WORKLOAD_TIMEOUT:g}s" in outcome["message"], outcome


# --- answers that decode to gigabytes -----------------------------------------------


def empty_objects(size: int) -> bytes:
    """A discovery answer of about ``size`` bytes of ``{}`` values: ~25 times as much
    memory once decoded."""
    count = size // 3
    return b'{"kind":"APIResourceList","resources":[' + b",".join([b"{}"] * count) + b"]}"


def answer_with(body: bytes) -> Respond:
    def respond(handler: http.server.BaseHTTPRequestHandler, done: threading.Event) -> None:
        # No Content-Length: the body runs until the connection closes, so the
        # client has to count what it reads.
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Connection", "close")
        handler.end_headers()
        view = memoryview(body)
        while view and not done.is_set():
            handler.wfile.write(view[: 1 << 20])
            view = view[1 << 20 :]
        handler.close_connection = True

    return respond


def test_answers_that_decode_to_gigabytes_are_refused_before_decoding(
    controller: ControllerProcess, mgmt: TestbedClient, namespace: str
) -> None:
    mgmt.create(source_configmap(namespace, "g", {"a": manifests(configmap_obj(unique("g")))}))
    cases = {
        # 3.5 MiB (under the byte limit) of {}: about 1.2 million values.
        "values": (empty_objects(7 * (1 << 19)), "JSON values"),
        # 24 MiB of them: refused on bytes before the rest is read.
        "bytes": (empty_objects(24 << 20), "bytes"),
    }
    with contextlib.ExitStack() as servers:
        for case, (body, _) in cases.items():
            port, ca_pem = servers.enter_context(hostile_server(answer_with(body)))
            config = token_kubeconfig(port, ca_pem)
            add_cluster_with_kubeconfig(mgmt, namespace, f"big-{case}", {"big": "1"}, config)
        mgmt.create(crs_obj(namespace, "g", [("ConfigMap", "g")], {"big": "1"}))
        outcomes = {
            case: wait_for(
                lambda case=case: failure(mgmt, namespace, "g", f"big-{case}"),  # type: ignore[misc]
                TIMEOUT,
                message=f"a failure outcome for big-{case}",
            )
            for case in cases
        }
    # Decoded, these answers would take ~90 and ~600 MiB: each is refused by its limit.
    for case, (_, limit) in cases.items():
        assert outcomes[case]["reason"] == "ClusterUnreachable", outcomes[case]
        assert limit in outcomes[case]["message"], outcomes[case]
    # The status is folded a moment after the outcomes.
    ready = wait_condition(mgmt, namespace, "g", "Ready", "False", "ClusterUnreachable")
    assert "big-values" in ready["message"] or "big-bytes" in ready["message"], ready


# --- an encrypted client key --------------------------------------------------------


def test_an_encrypted_client_key_is_refused_without_a_prompt(
    controller: ControllerProcess, mgmt: TestbedClient, namespace: str
) -> None:
    ca = CertificateAuthority.generate("encrypted-key-ca")
    client = ca.issue_client("tenant")
    key = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.BestAvailableEncryption(b"pass phrase"),
    )
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    config = kubeconfig(
        {"server": f"https://127.0.0.1:{port}", "certificate-authority-data": pem_b64(ca.cert_pem)},
        {"client-certificate-data": pem_b64(client.cert_pem), "client-key-data": pem_b64(key)},
    )
    mgmt.create(source_configmap(namespace, "k", {"a": manifests(configmap_obj(unique("k")))}))
    add_cluster_with_kubeconfig(mgmt, namespace, "enc", {"enc": "1"}, config)
    mgmt.create(crs_obj(namespace, "k", [("ConfigMap", "k")], {"enc": "1"}))
    cond = wait_condition(mgmt, namespace, "k", "Ready", "False", "UnsupportedKubeconfig")
    assert "client-key-data is encrypted" in cond["message"], cond["message"]
    assert "pass phrase:" not in controller.log_text().lower()
    assert base64.b64encode(key).decode()[:40] not in controller.log_text()

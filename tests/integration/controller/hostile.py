"""What a hostile tenant or workload server brings, for the tests that play one:
kubeconfigs written by hand, Clusters whose kubeconfig Secret holds them as is, and
small TLS servers on loopback that answer however a test tells them to."""

from __future__ import annotations

import base64
import contextlib
import http.server
import ssl
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from crs_controller.testbed import TestbedClient
from crs_controller.testbed.certs import CertificateAuthority
from crs_controller.testbed.clusters import set_cluster_initialized

from .support import CLUSTER_API

Obj = dict[str, Any]
# Answers one request; the event is set when the test ends (long answers stop then).
Respond = Callable[[http.server.BaseHTTPRequestHandler, threading.Event], None]


def pem_b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def kubeconfig(cluster: Obj, user: Obj) -> Obj:
    """A one-context kubeconfig with these cluster and user entries, as a tenant
    would write it."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }


def add_cluster_with_kubeconfig(
    mgmt: TestbedClient, namespace: str, name: str, labels: dict[str, str], config: Obj | str
) -> None:
    """An initialized Cluster whose kubeconfig Secret holds ``config`` as written by a
    tenant (a dict is written as YAML, text as it is)."""
    mgmt.create(
        {
            "apiVersion": CLUSTER_API,
            "kind": "Cluster",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"controlPlaneEndpoint": {"host": "127.0.0.1", "port": 6443}},
        }
    )
    text = config if isinstance(config, str) else yaml.safe_dump(config)
    mgmt.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": f"{name}-kubeconfig", "namespace": namespace},
            "type": "cluster.x-k8s.io/secret",
            "data": {"value": base64.b64encode(text.encode()).decode()},
        }
    )
    set_cluster_initialized(mgmt, name=name, namespace=namespace)


def serving_context(name: str) -> tuple[ssl.SSLContext, bytes]:
    """A server's TLS context for loopback, its certificate issued by a new CA called
    ``name``; returns it and the CA's certificate (the key files are removed again)."""
    ca = CertificateAuthority.generate(name)
    pair = ca.issue_serving()
    with tempfile.TemporaryDirectory(prefix=f"{name}-") as tmp:
        directory = Path(tmp)
        (directory / "tls.crt").write_bytes(pair.cert_pem)
        (directory / "tls.key").write_bytes(pair.key_pem)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(directory / "tls.crt", directory / "tls.key")
    return context, ca.cert_pem


@contextlib.contextmanager
def hostile_server(respond: Respond) -> Iterator[tuple[int, bytes]]:
    """A TLS server on loopback answering every request with ``respond``; yields its
    port and CA certificate. Answers in progress end when the test does."""
    context, ca_pem = serving_context("hostile-workload-ca")
    done = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            with contextlib.suppress(OSError):
                respond(self, done)

        do_GET = do_PATCH = do_POST = do_PUT = do_DELETE = _answer  # noqa: N815

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], ca_pem
    finally:
        done.set()
        server.shutdown()
        server.server_close()

"""The Cluster API Runtime Extension: BeforeClusterDelete, served over TLS only.

Discovery lists one handler; the hook answers ``retryAfterSeconds > 0`` while the
cluster still has add-ons to clean up (and ``uninstall.timeout`` has not passed), so
Cluster API holds the deletion of a topology-managed Cluster until then.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog

log = structlog.get_logger(__name__)

HOOKS_API = "hooks.runtime.cluster.x-k8s.io/v1alpha1"
PREFIX = f"/{HOOKS_API}"
HANDLER = "before-cluster-delete"
DISCOVERY_PATH = f"{PREFIX}/discovery"
HOOK_PATH = f"{PREFIX}/beforeclusterdelete/{HANDLER}"
MAX_BODY = 4 * 1024 * 1024

Status = Callable[[dict[str, Any]], tuple[int, str]]


def discovery() -> dict[str, Any]:
    return {
        "apiVersion": HOOKS_API,
        "kind": "DiscoveryResponse",
        "status": "Success",
        "handlers": [
            {
                "name": HANDLER,
                "requestHook": {"apiVersion": HOOKS_API, "hook": "BeforeClusterDelete"},
                "timeoutSeconds": 10,
                "failurePolicy": "Fail",
            }
        ],
    }


def answer(request: dict[str, Any], status: Status) -> dict[str, Any]:
    """The BeforeClusterDeleteResponse for a request (pure, given ``status``)."""
    cluster = request.get("cluster")
    base = {"apiVersion": HOOKS_API, "kind": "BeforeClusterDeleteResponse"}
    if request.get("kind") != "BeforeClusterDeleteRequest" or not isinstance(cluster, dict):
        return {**base, "status": "Failure", "message": "expected a BeforeClusterDeleteRequest"}
    retry_after, message = status(cluster)
    return {**base, "status": "Success", "message": message, "retryAfterSeconds": retry_after}


def tls_context(cert_dir: str) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    directory = Path(cert_dir)
    context.load_cert_chain(directory / "tls.crt", directory / "tls.key")
    return context


async def serve(host: str, port: int, cert_dir: str, status: Status) -> asyncio.Server:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            code, body = await _respond(reader, status)
            payload = json.dumps(body).encode()
            writer.write(
                f"HTTP/1.1 {code}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
                + payload
            )
            await writer.drain()
        except (TimeoutError, ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, host, port, ssl=tls_context(cert_dir))


async def _respond(reader: asyncio.StreamReader, status: Status) -> tuple[str, dict[str, Any]]:
    request_line = (await asyncio.wait_for(reader.readline(), 10)).decode("latin-1").split()
    length = 0
    while (line := await asyncio.wait_for(reader.readline(), 10)) not in (b"\r\n", b"\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip()) if value.strip().isdigit() else -1
    if len(request_line) < 2 or not 0 <= length <= MAX_BODY:
        return "400 Bad Request", {"message": "bad request"}
    path = request_line[1].split("?")[0]
    raw = await asyncio.wait_for(reader.readexactly(length), 10) if length else b""
    if path == DISCOVERY_PATH:
        return "200 OK", discovery()
    if path != HOOK_PATH or request_line[0] != "POST":
        return "404 Not Found", {"message": f"no handler at {path}"}
    try:
        request = json.loads(raw or b"{}")
    except ValueError:
        return "400 Bad Request", {"message": "body is not JSON"}
    response = answer(request if isinstance(request, dict) else {}, status)
    log.info("BeforeClusterDelete", retry_after=response.get("retryAfterSeconds"))
    return "200 OK", response

"""A minimal HTTP endpoint for /healthz, /readyz and Prometheus /metrics."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest


async def serve(host: str, port: int, ready: Callable[[], bool]) -> asyncio.Server:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readline(), 5)
            while (await asyncio.wait_for(reader.readline(), 5)) not in (b"\r\n", b"\n", b""):
                pass
            parts = request.decode("latin-1").split()
            path = parts[1] if len(parts) > 1 else "/"
            status, ctype, body = _route(path.split("?")[0], ready)
            head = (
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            )
            writer.write(head.encode() + body)
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, host, port)


def _route(path: str, ready: Callable[[], bool]) -> tuple[str, str, bytes]:
    if path == "/healthz":
        return "200 OK", "text/plain", b"ok"
    if path == "/readyz":
        return (
            ("200 OK", "text/plain", b"ok")
            if ready()
            else (
                "503 Service Unavailable",
                "text/plain",
                b"caches not synced",
            )
        )
    if path == "/metrics":
        return "200 OK", CONTENT_TYPE_LATEST, generate_latest()
    return "404 Not Found", "text/plain", b"not found"

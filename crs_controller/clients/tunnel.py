"""Connections to a server through a ``proxy-url``: a CONNECT tunnel, then TLS to the
server inside it, checked as a direct connection is.

httpcore's own tunnel names the server by its URL's host in the TLS handshake (SNI)
and checks the certificate against that host, whatever ``tls-server-name`` says: a
server reached by address whose certificate names only its ``tls-server-name`` could
not be reached through a proxy. Here the handshake inside the tunnel uses the
``tls-server-name`` (else the URL's host), exactly as a direct connection does, and
with the same TLS context: same certificate authorities, same hostname check.

The CONNECT request to the proxy carries none of the request's extensions, so an
``https://`` proxy's own handshake names the proxy, never the server.
"""

from __future__ import annotations

import base64
import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import anyio
import httpcore

Headers = tuple[tuple[bytes, bytes], ...]


@dataclass(frozen=True)
class Via:
    """How a tunnel reaches the server: through which proxy, with which of its
    credentials, and the server's TLS."""

    proxy: str  # the proxy's URL, credentials taken out
    headers: Headers  # Proxy-Authorization, if the proxy's URL held credentials
    context: ssl.SSLContext  # the server's, as for a direct connection
    server_name: str | None  # tls-server-name
    keepalive_expiry: float
    backend: httpcore.AsyncNetworkBackend

    @classmethod
    def of(
        cls,
        proxy_url: str,
        context: ssl.SSLContext,
        server_name: str | None,
        *,
        keepalive_expiry: float,
        backend: httpcore.AsyncNetworkBackend,
    ) -> Via:
        """``proxy_url`` split into the proxy's bare URL and its credentials' header."""
        parts = urlsplit(proxy_url)
        bare = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
        headers: Headers = ()
        if parts.username:
            user_pass = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
            basic = base64.b64encode(user_pass.encode()).decode("ascii")
            headers = ((b"Proxy-Authorization", f"Basic {basic}".encode("ascii")),)
        return cls(bare, headers, context, server_name, keepalive_expiry, backend)


class ProxyPool(httpcore.AsyncHTTPProxy):
    """httpcore's proxy pool whose connections to an ``https`` server are ``Tunnel``s."""

    def __init__(self, via: Via, **limits: Any) -> None:
        super().__init__(
            via.proxy,
            proxy_headers=list(via.headers),
            ssl_context=via.context,
            keepalive_expiry=via.keepalive_expiry,
            network_backend=via.backend,
            **limits,
        )
        self._via = via

    def create_connection(self, origin: httpcore.Origin) -> httpcore.AsyncConnectionInterface:
        if origin.scheme != b"https":  # no TLS to the server: nothing to name
            return super().create_connection(origin)
        return Tunnel(origin, self._via)


class Tunnel(httpcore.AsyncConnectionInterface):
    """One connection to ``server`` through the proxy, opened by its first request."""

    def __init__(self, server: httpcore.Origin, via: Via) -> None:
        self._server = server
        self._via = via
        self._connection: httpcore.AsyncConnectionInterface = httpcore.AsyncHTTPConnection(
            origin=httpcore.URL(via.proxy).origin,
            keepalive_expiry=via.keepalive_expiry,
            network_backend=via.backend,
        )
        self._lock = anyio.Lock()
        self._open = False

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        async with self._lock:
            if not self._open:
                timeout = request.extensions.get("timeout", {})
                stream = await self._tls(await self._connect(timeout), timeout.get("connect"))
                self._connection = httpcore.AsyncHTTP11Connection(
                    origin=self._server, stream=stream, keepalive_expiry=self._via.keepalive_expiry
                )
                self._open = True
        return await self._connection.handle_async_request(request)

    async def _connect(self, timeout: dict[str, float]) -> httpcore.AsyncNetworkStream:
        """The proxy's stream, once it has answered CONNECT with a 2xx."""
        target = b"%b:%d" % (self._server.host, self._server.port)
        proxy = httpcore.URL(self._via.proxy)
        url = httpcore.URL(scheme=proxy.scheme, host=proxy.host, port=proxy.port, target=target)
        headers = [(b"Host", target), (b"Accept", b"*/*"), *self._via.headers]
        connect = httpcore.Request(
            b"CONNECT", url, headers=headers, extensions={"timeout": timeout}
        )
        response = await self._connection.handle_async_request(connect)
        if not 200 <= response.status < 300:
            reason = response.extensions.get("reason_phrase", b"").decode("ascii", "ignore")
            await self._connection.aclose()
            raise httpcore.ProxyError(f"{response.status} {reason}")
        stream: httpcore.AsyncNetworkStream = response.extensions["network_stream"]
        return stream

    async def _tls(
        self, stream: httpcore.AsyncNetworkStream, timeout: float | None
    ) -> httpcore.AsyncNetworkStream:
        """TLS to the server inside the tunnel: the ``tls-server-name`` (else the URL's
        host) is the name asked for and the name the certificate is checked against."""
        name = self._via.server_name or self._server.host.decode("ascii")
        self._via.context.set_alpn_protocols(["http/1.1"])
        try:
            return await stream.start_tls(self._via.context, server_hostname=name, timeout=timeout)
        except BaseException:
            await self._connection.aclose()
            raise

    def can_handle_request(self, origin: httpcore.Origin) -> bool:
        return origin == self._server

    async def aclose(self) -> None:
        await self._connection.aclose()

    def info(self) -> str:
        return self._connection.info()

    def is_available(self) -> bool:
        return self._connection.is_available()

    def has_expired(self) -> bool:
        return self._connection.has_expired()

    def is_idle(self) -> bool:
        return self._connection.is_idle()

    def is_closed(self) -> bool:
        return self._connection.is_closed()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} [{self.info()}]>"

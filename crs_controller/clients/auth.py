"""What a client's requests authenticate with: the endpoint's bearer token (inline, or
a file re-read as it rotates) or its client certificate, or an exec plugin's
credential.

Only an endpoint from the operator's own kubeconfig can name an exec plugin, which the
client runs when it needs a credential, again once that expires or the server refuses
it (401: the request is sent once more), with new connections for a new client
certificate: it is part of the TLS handshake, so the credentials hold the connections.
They can let go of the connections and the TLS context while no request is under way
(``release``): both are built again, from the same endpoint, for the next request.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from crs_controller.clients.exec_credentials import ExecCredential, ExecCredentials
from crs_controller.clients.kubeconfig import Endpoint
from crs_controller.clients.tls import ssl_context
from crs_controller.clients.transport import Connect, Transport
from crs_controller.core.errors import Unreachable

TOKEN_FILE_REFRESH = 60.0  # seconds; client-go re-reads a token file as often
# A pool left behind when an exec plugin's client certificate changed is closed this
# long after: longer than any request on it can last (a watch: 290 + 30 s).
RETIRED_POOL_SECONDS = 600.0


@dataclass(frozen=True, repr=False)
class Auth:
    """What one request authenticates with; ``credential``: the exec plugin's, if any."""

    token: str | None
    credential: ExecCredential | None


class Credentials:
    """The credentials of one client's requests and the connections they go over
    (``pool``): the endpoint's, or the exec plugin's, with a new pool for each new
    client certificate the plugin prints. The TLS context is built here once, so a CA
    or key that is not PEM is refused when the client is built, not at a request."""

    def __init__(self, endpoint: Endpoint, name: str, connect: Connect) -> None:
        self._endpoint = endpoint
        self._name = name
        self._token = _TokenSource(endpoint)
        # The operator's exec plugin (never set for a workload cluster's kubeconfig).
        self._exec = ExecCredentials(endpoint.exec) if endpoint.exec else None
        self._connect = connect
        self._pool: Transport | None = connect(endpoint, ssl_context(endpoint, name))
        # What the current pool is built from: the endpoint, with the plugin's
        # certificate once it printed one; a released pool is built again from it.
        self._pool_endpoint = endpoint
        self._pool_pair = (endpoint.cert_pem, endpoint.key_pem)
        self._retired: list[tuple[float, Transport]] = []

    @property
    def pool(self) -> Transport:
        """The connections of the next request, with their TLS context: built again
        from the same endpoint if they were released."""
        if self._pool is None:
            endpoint = self._pool_endpoint
            self._pool = self._connect(endpoint, ssl_context(endpoint, self._name))
        return self._pool

    @property
    def holds_pool(self) -> bool:
        return self._pool is not None

    async def release(self) -> None:
        """Close the connections and drop the TLS context (about 25 KB, and each idle
        TLS connection about 40 KB); call only while no request is under way."""
        pool, self._pool = self._pool, None  # swapped before the await
        if pool is not None:
            await pool.aclose()

    async def close(self) -> None:
        for _, pool in self._retired:
            await pool.aclose()
        self._retired.clear()
        await self.release()

    async def authorize(self) -> Auth:
        """The credentials of the next request: the endpoint's, or the exec plugin's
        (run here, outside any request's deadline, when none is cached)."""
        if self._exec is None:
            return Auth(self._token.get(), None)
        credential = await self._exec.get()
        if credential.cert_pem and (credential.cert_pem, credential.key_pem) != self._pool_pair:
            await self._renew_pool(credential)
        return Auth(credential.token or self._token.get(), credential)

    def refused(self, auth: Auth) -> None:
        """The server answered 401 to ``auth``: an exec plugin's credential is fetched
        again for the next request."""
        if auth.credential and self._exec:
            self._exec.refused(auth.credential)

    async def _renew_pool(self, credential: ExecCredential) -> None:
        """New connections for the plugin's new client certificate (it is part of the
        TLS handshake). Requests under way finish on the old pool, closed later."""
        endpoint = replace(self._endpoint, cert_pem=credential.cert_pem, key_pem=credential.key_pem)
        try:
            context = ssl_context(endpoint, self._name)
        except Unreachable as exc:
            plugin = self._endpoint.exec
            where = f"{plugin.where}: {plugin.command}" if plugin else "exec"
            reason = str(exc).removeprefix(f"{self._name}: ")
            raise type(exc)(
                f"{self._name}: {where} printed an unusable credential: {reason}"
            ) from None
        now = time.monotonic()
        # Swapped before the first await: a concurrent request sees the new pool.
        if self._pool is not None:
            self._retired.append((now, self._pool))
        self._pool = self._connect(endpoint, context)
        self._pool_endpoint = endpoint
        self._pool_pair = (credential.cert_pem, credential.key_pem)
        for retired in [r for r in self._retired if now - r[0] > RETIRED_POOL_SECONDS]:
            self._retired.remove(retired)
            await retired[1].aclose()


class _TokenSource:
    """The bearer token: inline, or read from a file and re-read as it rotates."""

    def __init__(self, endpoint: Endpoint) -> None:
        self._inline = endpoint.token
        self._file = endpoint.token_file
        self._cached: tuple[float, str | None] | None = None

    def get(self) -> str | None:
        if self._file is None:
            return self._inline
        now = time.monotonic()
        if self._cached is None or now - self._cached[0] > TOKEN_FILE_REFRESH:
            try:
                token = self._file.read_text(encoding="utf-8").strip() or None
            except OSError:
                token = self._cached[1] if self._cached else None
            self._cached = (now, token)
        return self._cached[1]

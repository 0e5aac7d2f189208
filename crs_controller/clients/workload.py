"""Clients for workload clusters, built from their ``<cluster>-kubeconfig`` Secrets.

One client per cluster, reused across reconciles and rebuilt only when the Secret's
content changes. The kubeconfig is untrusted input (``clients.kubeconfig`` decides
what of it is used); it is never logged, and errors name the cluster and the field,
never a value.

Reading it is bounded before anything is parsed: at most ``MAX_KUBECONFIG_BYTES``,
parsed with libyaml under the node and depth limits of a resource value
(``core.manifests.limits``), in a worker thread unless it is small. What came of it,
the client or the refusal, is kept per cluster by content hash: a refused Secret
retried every few seconds costs one hash, never a second parse.

A client's connections and TLS context cost about 65 KB per cluster (measured: a
context 23 KB, an idle TLS connection 39 KB) and were kept as long as the client, so
an edit reaching every cluster held one of each per cluster. At most
``WARM_CLIENTS`` clients hold them at once: the ones used last. An older one, and one
not used for ``KEEPALIVE_SECONDS``, lets go of them once no request of it is under way
and builds them again from its own endpoint (kept, with what was discovered of the
server) when it is used next.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

import xxhash

from crs_controller.clients.kube import USER_AGENT, Connect, KubeClient
from crs_controller.clients.kubeconfig import workload_endpoint
from crs_controller.clients.transport import KEEPALIVE_SECONDS, lane_pool
from crs_controller.core.errors import InvalidManifest, Unreachable, UnsupportedKubeconfig
from crs_controller.core.manifests.documents import load_documents

KUBECONFIG_KEY = "value"

# A kubeconfig Cluster API writes is about 6 KiB (CA, client certificate and key,
# base64 inside YAML); one with a 4096-bit key and a bundle of a dozen CA
# certificates stays under 30 KiB. 64 KiB is ten times the usual size and bounds
# the parse: 130 ms in a worker thread for 64 KiB of the densest YAML ("[{},{},…]",
# measured with libyaml), where pure-Python YAML on the event loop took about 10 s
# per MiB. client-go sets no limit of its own; the API server's is the Secret's 1 MiB.
MAX_KUBECONFIG_BYTES = 64 * 1024
# The parse costs per node, not per byte: a real 6 KiB kubeconfig takes 0.2 ms (a few
# long base64 scalars), 16 KiB of the densest YAML 23 ms. Up to 1 KiB of base64 it is
# at most ~1.5 ms whatever the shape, cheaper inline than handed to a thread.
PARSE_INLINE_BYTES = 1024

KUBECONFIG_SUFFIX = "-kubeconfig"

# Clients holding their connections and TLS context at once, fleet-wide: about 17 MiB,
# and more than the clusters a reconcile pass of the default concurrency touches.
WARM_CLIENTS = 256

Decode = Callable[[Mapping[str, Any], str], dict[str, Any]]


def kubeconfig_secret_name(cluster_name: str) -> str:
    return f"{cluster_name}{KUBECONFIG_SUFFIX}"


def cluster_of_kubeconfig_secret(secret_name: str) -> str | None:
    """The Cluster whose kubeconfig a Secret of this name would be, if any."""
    if secret_name.endswith(KUBECONFIG_SUFFIX) and len(secret_name) > len(KUBECONFIG_SUFFIX):
        return secret_name[: -len(KUBECONFIG_SUFFIX)]
    return None


def kubeconfig_value(secret: Mapping[str, Any], cluster: str) -> str:
    """The Secret's base64 ``value``, or Unreachable: missing, or over the size limit
    (checked on its length, before anything is decoded)."""
    raw = (secret.get("data") or {}).get(KUBECONFIG_KEY)
    if not raw or not isinstance(raw, str):
        raise Unreachable(f"cluster {cluster}: kubeconfig Secret has no '{KUBECONFIG_KEY}' key")
    if _decoded_length(raw) > MAX_KUBECONFIG_BYTES:
        raise UnsupportedKubeconfig(
            f"cluster {cluster}: kubeconfig Secret key '{KUBECONFIG_KEY}' is larger than "
            f"{MAX_KUBECONFIG_BYTES // 1024} KiB"
        )
    return raw


def _decoded_length(encoded: str) -> int:
    """How many bytes base64 ``encoded`` decodes to, known from its length alone (for
    invalid base64, roughly: it is refused when decoded anyway)."""
    return len(encoded) * 3 // 4 - encoded.endswith("=") - encoded.endswith("==")


def decode_kubeconfig(secret: Mapping[str, Any], cluster: str) -> dict[str, Any]:
    """The kubeconfig dict held by a CAPI kubeconfig Secret, or Unreachable."""
    raw = kubeconfig_value(secret, cluster)
    loaded: Any = None
    try:
        text = base64.b64decode(raw, validate=True).decode("utf-8")
        documents = load_documents("kubeconfig", text)
    except (binascii.Error, ValueError, InvalidManifest):
        documents = []  # not chained: decoder and YAML errors may quote the (secret) input
    if len(documents) == 1:
        loaded = documents[0]
    if not isinstance(loaded, dict) or not loaded.get("clusters"):
        raise Unreachable(f"cluster {cluster}: kubeconfig Secret is not a kubeconfig")
    return loaded


def fingerprint(secret: Mapping[str, Any]) -> str:
    """The content hash of what a kubeconfig Secret's client is built from."""
    raw = (secret.get("data") or {}).get(KUBECONFIG_KEY)
    return xxhash.xxh3_128_hexdigest(str(raw).encode())


class _Refusal:
    """A kubeconfig that was refused: raised again, as new, on every retry."""

    def __init__(self, error: Unreachable) -> None:
        unsupported = isinstance(error, UnsupportedKubeconfig)
        self.kind: type[Unreachable] = UnsupportedKubeconfig if unsupported else Unreachable
        self.message = str(error)

    def error(self) -> Unreachable:
        return self.kind(self.message)


class WorkloadClients:
    """Per-cluster client cache keyed by (namespace, name), holding for each the
    content hash of its Secret and what came of it: a client, or a refusal."""

    def __init__(
        self,
        *,
        timeout: float = 15.0,
        allow_proxy: bool = False,
        user_agent: str = USER_AGENT,
        decode: Decode = decode_kubeconfig,
        warm: int = WARM_CLIENTS,
        clock: Callable[[], float] = time.monotonic,
        connect: Connect | None = None,
    ) -> None:
        """``warm``: at most this many clients hold connections and a TLS context at
        once, besides those with a request under way. ``connect``: how a client
        reaches its server (default: the network; a test answers from memory)."""
        self._clients: dict[tuple[str, str], tuple[str, KubeClient | _Refusal]] = {}
        self._timeout = timeout
        self._allow_proxy = allow_proxy
        self._user_agent = user_agent
        self._decode = decode
        self._warm_limit = max(1, warm)
        self._clock = clock
        self._connect = connect
        # The clients that may hold connections, least recently used first, with when
        # each was last asked for.
        self._warm: OrderedDict[tuple[str, str], float] = OrderedDict()

    async def get(self, namespace: str, cluster: str, secret: Mapping[str, Any]) -> KubeClient:
        """The cluster's client; raises Unreachable (or UnsupportedKubeconfig), the
        same as last time without parsing again while the Secret is unchanged."""
        key = (namespace, cluster)
        digest = fingerprint(secret)
        cached = self._clients.get(key)
        if cached is None or cached[0] != digest:
            await self.forget(namespace, cluster)
            cached = (digest, await self._build(namespace, cluster, secret))
            self._clients[key] = cached
        if isinstance(cached[1], _Refusal):
            raise cached[1].error()
        now = self._clock()
        self._warm[key] = now
        self._warm.move_to_end(key)
        await self._cool(now, keep=key)
        return cached[1]

    async def _cool(self, now: float, keep: tuple[str, str]) -> None:
        """Release the connections of the clients past the bound (the least recently
        used) or idle past the keep-alive, except ``keep`` and those with a request
        under way (looked at again next time)."""
        while (found := self._next_to_release(now, keep)) is not None:
            key, client = found
            self._warm.pop(key, None)
            if isinstance(client, KubeClient):
                await client.release()

    def _next_to_release(
        self, now: float, keep: tuple[str, str]
    ) -> tuple[tuple[str, str], KubeClient | _Refusal | None] | None:
        """The least recently used client to release now, if any. Called for every
        client asked for, so it copies nothing: it looks at the oldest first and stops
        at the first one within the bound and the keep-alive."""
        excess = len(self._warm) - self._warm_limit
        for key, used in self._warm.items():
            if excess <= 0 and now - used <= KEEPALIVE_SECONDS:
                return None  # the rest are newer
            held = self._clients.get(key)
            client = held[1] if held else None
            if key != keep and not (isinstance(client, KubeClient) and client.busy):
                return key, client
        return None

    @property
    def warm(self) -> int:
        """How many clients may hold connections and a TLS context now."""
        return len(self._warm)

    async def _build(
        self, namespace: str, cluster: str, secret: Mapping[str, Any]
    ) -> KubeClient | _Refusal:
        """The cluster's client, or why there is none. What the kubeconfig is refused
        for (not a kubeconfig, a field refused, a CA or key that is not PEM) is kept
        until the Secret changes; any other error escapes uncached, so the next pass
        builds the client again (a thread that could not start, memory)."""
        try:
            return await self._client(f"cluster {namespace}/{cluster}", namespace, cluster, secret)
        except Unreachable as exc:
            return _Refusal(exc)

    async def _client(
        self, name: str, namespace: str, cluster: str, secret: Mapping[str, Any]
    ) -> KubeClient:
        raw = kubeconfig_value(secret, cluster)
        if len(raw) <= PARSE_INLINE_BYTES:
            config = self._decode(secret, cluster)
        else:
            config = await asyncio.to_thread(self._decode, secret, cluster)
        try:
            endpoint = workload_endpoint(config, allow_proxy=self._allow_proxy)
        except Unreachable as exc:
            # The message names a field of the kubeconfig; say whose kubeconfig it is.
            raise type(exc)(f"{name}: kubeconfig Secret: {exc}") from None
        # The TLS context: a CA or key that is not PEM is refused here.
        return KubeClient(
            endpoint,
            name=name,
            timeout=self._timeout,
            user_agent=self._user_agent,
            transport=self._connect or lane_pool(namespace),  # the tenant's lookups
        )

    async def forget(self, namespace: str, cluster: str) -> None:
        self._warm.pop((namespace, cluster), None)
        cached = self._clients.pop((namespace, cluster), None)
        if cached is not None and isinstance(cached[1], KubeClient):
            await cached[1].close()

    async def close(self) -> None:
        for _, held in self._clients.values():
            if isinstance(held, KubeClient):
                await held.close()
        self._clients.clear()
        self._warm.clear()

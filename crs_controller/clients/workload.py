"""Clients for workload clusters, built from their ``<cluster>-kubeconfig`` Secrets.

One client per cluster, reused across reconciles and rebuilt only when the Secret's
content changes. The kubeconfig is untrusted input (``clients.kubeconfig`` decides
what of it is used); it is never logged, and errors name the cluster and the field,
never a value.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

import xxhash
import yaml

from crs_controller.clients.kube import USER_AGENT, KubeClient
from crs_controller.clients.kubeconfig import workload_endpoint
from crs_controller.core.errors import Unreachable

KUBECONFIG_KEY = "value"


KUBECONFIG_SUFFIX = "-kubeconfig"


def kubeconfig_secret_name(cluster_name: str) -> str:
    return f"{cluster_name}{KUBECONFIG_SUFFIX}"


def cluster_of_kubeconfig_secret(secret_name: str) -> str | None:
    """The Cluster whose kubeconfig a Secret of this name would be, if any."""
    if secret_name.endswith(KUBECONFIG_SUFFIX) and len(secret_name) > len(KUBECONFIG_SUFFIX):
        return secret_name[: -len(KUBECONFIG_SUFFIX)]
    return None


def decode_kubeconfig(secret: Mapping[str, Any], cluster: str) -> dict[str, Any]:
    """The kubeconfig dict held by a CAPI kubeconfig Secret, or Unreachable."""
    raw = (secret.get("data") or {}).get(KUBECONFIG_KEY)
    if not raw:
        raise Unreachable(f"cluster {cluster}: kubeconfig Secret has no '{KUBECONFIG_KEY}' key")
    try:
        loaded = yaml.safe_load(base64.b64decode(raw, validate=True))
    except (binascii.Error, ValueError, yaml.YAMLError, RecursionError):
        loaded = None  # not chained: YAML errors quote the (secret) input
    if loaded is None:
        raise Unreachable(f"cluster {cluster}: kubeconfig Secret is not a kubeconfig")
    if not isinstance(loaded, dict) or not loaded.get("clusters"):
        raise Unreachable(f"cluster {cluster}: kubeconfig Secret is not a kubeconfig")
    return loaded


class WorkloadClients:
    """Per-cluster client cache keyed by (namespace, name)."""

    def __init__(
        self, *, timeout: float = 15.0, allow_proxy: bool = False, user_agent: str = USER_AGENT
    ) -> None:
        self._clients: dict[tuple[str, str], tuple[str, KubeClient]] = {}
        self._timeout = timeout
        self._allow_proxy = allow_proxy
        self._user_agent = user_agent

    async def get(self, namespace: str, cluster: str, secret: Mapping[str, Any]) -> KubeClient:
        key = (namespace, cluster)
        data = repr(sorted((secret.get("data") or {}).items())).encode()
        fingerprint = xxhash.xxh3_64_hexdigest(data)
        cached = self._clients.get(key)
        if cached is not None and cached[0] == fingerprint:
            return cached[1]
        if cached is not None:
            await cached[1].close()
            del self._clients[key]
        name = f"cluster {namespace}/{cluster}"
        config = decode_kubeconfig(secret, cluster)
        try:
            endpoint = workload_endpoint(config, allow_proxy=self._allow_proxy)
        except Unreachable as exc:
            # The message names a field of the kubeconfig; say whose kubeconfig it is.
            raise type(exc)(f"{name}: kubeconfig Secret: {exc}") from None
        client = KubeClient(endpoint, name=name, timeout=self._timeout, user_agent=self._user_agent)
        self._clients[key] = (fingerprint, client)
        return client

    async def forget(self, namespace: str, cluster: str) -> None:
        cached = self._clients.pop((namespace, cluster), None)
        if cached is not None:
            await cached[1].close()

    async def close(self) -> None:
        for _, client in self._clients.values():
            await client.close()
        self._clients.clear()

"""Benchmark: the controller's CPU for one workload request, by what it pays for.

Against one real workload API server of the test bed, with N clusters' kubeconfigs
(each its own client certificate, as Cluster API writes them), prints one JSON object
with the controller-side CPU per cluster, in ms (the server's CPU is not counted):

- ``context_build``: the TLS context from the kubeconfig (CA, client certificate, key);
- ``cold_request``: connect, TLS handshake, one server-side apply, close (the context
  given): what a cluster whose connection was released pays on top of the context;
- ``warm_request``: the same apply over a kept connection;
- ``warm_request_20_idle``: the same, the pool holding 20 idle connections besides (as
  the management client's may);

each for the connection pools as built (``clients.network`` under httpcore) and with
httpcore's own anyio streams (``httpcore_streams``), for comparison.

    .venv/bin/python hack/bench/connections.py --clusters 300
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpcore
from common import machine

from crs_controller.clients.kubeconfig import Endpoint, workload_endpoint
from crs_controller.clients.tls import ssl_context
from crs_controller.clients.transport import (
    KEEPALIVE_SECONDS,
    MAX_CONNECTIONS,
    MAX_IDLE_CONNECTIONS,
    NETWORK,
    Target,
)
from crs_controller.clients.workload import decode_kubeconfig
from crs_controller.testbed import ControlPlane
from crs_controller.testbed.clusters import kubeconfig_secret

BODY = json.dumps(
    {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "bench", "namespace": "default"},
        "data": {"addon.yaml": "x" * 4000},
    }
).encode()


def pool(context: ssl.SSLContext, streams: httpcore.AsyncNetworkBackend | None) -> Any:
    backend = {"network_backend": streams} if streams else {}
    return httpcore.AsyncConnectionPool(
        ssl_context=context,
        max_connections=MAX_CONNECTIONS,
        max_keepalive_connections=MAX_IDLE_CONNECTIONS,
        keepalive_expiry=KEEPALIVE_SECONDS,
        **backend,
    )


async def apply(connections: Any, target: Target) -> None:
    url = httpcore.URL(
        scheme=target.scheme,
        host=target.host,
        port=target.port,
        target=b"/api/v1/namespaces/default/configmaps/bench?fieldManager=bench&force=true",
    )
    headers = [
        (b"Host", target.host_header.encode()),
        (b"Content-Type", b"application/apply-patch+yaml"),
        (b"Content-Length", str(len(BODY)).encode()),
    ]
    answer = await connections.handle_async_request(
        httpcore.Request(b"PATCH", url, headers=headers, content=BODY)
    )
    await answer.aread()
    await answer.aclose()
    if answer.status not in (200, 201):
        raise RuntimeError(f"apply answered {answer.status}")


async def cpu_ms(n: int, step: Callable[[int], Awaitable[None]]) -> float:
    started = time.process_time()
    for i in range(n):
        await step(i)
    return round((time.process_time() - started) * 1000 / n, 3)


async def figures(
    endpoints: list[Endpoint], streams: httpcore.AsyncNetworkBackend | None
) -> dict[str, float]:
    n, target = len(endpoints), Target.of(endpoints[0].server)
    contexts = [ssl_context(e, "bench") for e in endpoints]

    async def build(i: int) -> None:
        ssl_context(endpoints[i], "bench")

    async def cold(i: int) -> None:
        connections = pool(contexts[i], streams)
        await apply(connections, target)
        await connections.aclose()

    warm = pool(contexts[0], streams)
    await apply(warm, target)
    result = {
        "context_build": await cpu_ms(n, build),
        "cold_request": await cpu_ms(n, cold),
        "warm_request": await cpu_ms(n, lambda _: apply(warm, target)),
    }
    await asyncio.gather(*[apply(warm, target) for _ in range(21)])  # 20 left idle
    result["warm_request_20_idle"] = await cpu_ms(n, lambda _: apply(warm, target))
    await warm.aclose()
    return result


async def run(n: int) -> dict[str, Any]:
    with ControlPlane.start(workloads=1) as plane:
        server = plane.workloads[0]
        endpoints = [
            workload_endpoint(
                decode_kubeconfig(
                    kubeconfig_secret(server, name=f"c{i}", namespace="bench"),
                    f"c{i}",
                )
            )
            for i in range(n)
        ]
        await figures(endpoints, NETWORK)  # warm-up: the server's caches, our imports
        return {
            "machine": machine()
            | {"load_average_at_start": [round(x, 2) for x in os.getloadavg()]},
            "clusters": n,
            "cpu_ms_per_cluster": await figures(endpoints, NETWORK),
            "httpcore_streams": await figures(endpoints, None),
            "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clusters", type=int, default=300)
    print(json.dumps(asyncio.run(run(parser.parse_args().clusters)), indent=2))


if __name__ == "__main__":
    main()

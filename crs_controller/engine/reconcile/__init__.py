"""The reconcilers: one Cluster (``cluster``: every matching CRS through the one gate,
``admission``, then its ``pair`` pass; the binding record, pruning and uninstall) and
one ClusterResourceSet (``crs``: finalizer and status; ``rollout`` plans). They read
caches and return a ``Result`` (``result``: requeue, retry, and the keys to wake);
they never see the queue (an import-linter contract). ``workload`` holds the only
code that talks to workload clusters."""

"""The reconcilers and what they do: one Cluster (every matching CRS's pass, apply,
drift reads, pruning, uninstall, the binding record) and one ClusterResourceSet
(finalizer and status). They read caches and return a ``Result``; they never see the
queue (an import-linter contract)."""

"""The controller's engine, in layers that only import downward: ``runtime`` (wiring,
queue, tasks, membership) over ``reconcile`` (one Cluster, one CRS; ``workload``
talks to workload clusters) over ``memory`` and ``index`` over ``io`` (informers,
Events, metrics, sources, stores)."""

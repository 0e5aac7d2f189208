"""The runtime: watches and caches, the work queue, supervised tasks, the controller
wiring (events to keys, keys to reconciles, results to queue operations), metrics and
Kubernetes Events. The only part of the engine that touches the queue."""

"""The runtime: the controller wiring (every watch declared once, events to keys,
keys to reconciles, results to queue operations), the work queue, supervised tasks
and shard membership. The only part of the engine that touches the queue."""

"""Replicas: Lease bodies and shard ownership."""

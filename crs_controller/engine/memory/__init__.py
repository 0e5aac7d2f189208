"""What the process remembers between reconciles, and nothing it could read from the
API instead: outcomes per CRS and cluster, rollout plans, the notes that become
Events."""

"""Kubernetes versions: SemVer ranges, and the version a cluster's control plane runs."""

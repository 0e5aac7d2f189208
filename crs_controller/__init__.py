"""crs-controller: a ClusterResourceSet controller for Cluster API."""

__version__ = "0.1.0"

"""The only code that talks to workload clusters: applying, observing (drift,
health), pruning and uninstalling, each with the pure decisions of its namesake in
``crs_controller.core``."""

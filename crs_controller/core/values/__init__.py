"""Per-cluster values: substitution into manifests, and dependsOn between CRSs."""

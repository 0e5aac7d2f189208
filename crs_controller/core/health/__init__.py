"""Health: kstatus-style readiness, and CRS-defined CEL rules."""

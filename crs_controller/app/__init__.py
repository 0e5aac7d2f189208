"""crs-controller."""

"""Manifests: parsing ConfigMap/Secret documents within limits, placeholders, hashing,
apply order.
"""

"""The API's shapes as read: pydantic models of the CRS and binding, Cluster facts,
label selectors.
"""

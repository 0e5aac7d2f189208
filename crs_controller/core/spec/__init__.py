"""A CRS compiled once when parsed: the parsed objects, the mode strategy, ignore
rules.
"""

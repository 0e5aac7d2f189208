"""What is recorded and what follows from it: bindings, status folding, drift, prune
and uninstall decisions, the upgrade gate.
"""

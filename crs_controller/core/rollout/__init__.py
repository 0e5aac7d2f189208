"""Rollout rules: the staged plan, maintenance windows."""

"""Notifications to the operator's receivers: what one says, in each format, and how
its delivery is retried."""

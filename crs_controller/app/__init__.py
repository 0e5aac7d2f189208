"""What people and Kubernetes meet: the command line (``cli``, ``commands/``), the
controller process (``runner``), its HTTP endpoints (``health``; ``extension``, the
Runtime Extension: BeforeClusterDelete and the upgrade hooks; ``serving``), logs and
the embedded demo."""

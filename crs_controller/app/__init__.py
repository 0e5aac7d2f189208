"""What people and Kubernetes meet: the command line (``cli``, ``commands/``), the
controller process (``runner``), its HTTP endpoints (``health``, ``extension`` for the
BeforeClusterDelete Runtime Extension, ``serving``), logs and the embedded demo."""

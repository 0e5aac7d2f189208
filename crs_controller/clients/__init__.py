"""The only code that talks to API servers: the ``KubeAPI`` protocol the engine depends
on (``api``), its HTTP implementation (``kube``), kubeconfigs trusted or not
(``kubeconfig``, ``exec_credentials`` for the operator's own) and the workload
clusters' clients (``workload``)."""

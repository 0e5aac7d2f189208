"""The only code that talks to API servers: the ``KubeAPI`` protocol the engine depends
on (``api``), its HTTP implementation (``kube``: the verbs, over ``discovery``, the
``answers`` read and decoded within limits, ``http_errors``, ``auth``, ``transport``
and ``tls``), kubeconfigs trusted or not (``kubeconfig``, ``exec_credentials`` for the
operator's own) and the workload clusters' clients (``workload``)."""

"""The extender's HTTP face: the kube-scheduler's ``/filter`` and ``/prioritize`` (``server``),
TLS (``tls``), the OpenAPI document (``openapi``) and the extender's metrics (``metrics``).

Rule: imports no API adapter (``extender.kube``, the kubernetes client).
"""

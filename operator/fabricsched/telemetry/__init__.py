"""Link health from port counters in Prometheus (``spec.health.prometheus``).

Rule: adapter. ``rules`` and ``defaults`` are pure (rule evaluation, flap damping: no I/O, no
clock); ``access`` is the operator's policy (allowed URLs, credential directories) and reads the
credential files a topology names; ``prometheus`` is the HTTP client; ``poller`` runs the rules
of one topology on an interval and hands findings (source ``prometheus``) to a ``Sink`` the
operator implements. It imports the core and the API models, never the controller: the
controller plugs it in.
"""

"""``fabricsched explain NAMESPACE/NAME``: one gang's plan, its path's health and its recent Events.

An adapter in three parts. ``report`` builds a typed ``Explanation`` from plain object dicts
(pure: no I/O, every string echoed from an object bounded by ``bounds``); ``render`` prints it
as text, JSON or YAML; ``reader`` fetches the objects from the API server (read-only: GET and
LIST only) and ``commands`` maps its failures to exit codes. Fields that newer operators add to
the FabricPlacement status (``commSlowdownAtPlacement``, the path's unhealthy elements,
conditions) are read by name when present; without them the path is derived from the
FabricTopology's ``status.degraded`` (``paths``).
"""

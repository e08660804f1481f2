"""The namespace opt-in: a mutating admission webhook, served by kopf inside ``fabricsched run``,
that sets ``schedulerName: fabricsched`` on the GPU pods of labelled namespaces.

Rule: adapter, beside the controller and the extender. ``mutation`` is the decision (pure, no
I/O); ``server`` plugs it into kopf's admission support. The composition root wires it in.
"""

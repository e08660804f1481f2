"""The fabric: nodes + FabricTopology -> hosts, switch domains per tier, health.

Rule: pure. No I/O, no kopf, no Kubernetes client, no clock reads (time is passed in).
Imports only ``fabricsched.api`` and ``fabricsched.ids``.
"""

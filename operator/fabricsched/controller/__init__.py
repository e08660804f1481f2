"""The kopf operator: watches Nodes, Pods, Jobs and FabricTopology objects, keeps one
in-memory cluster state current and writes status, placements and Events.

Rule: adapter. Calls the core (topology, placement); the core never imports it.
"""

"""The book of plans and what keeps it current: reservations, the followers of binds, ends,
health and the other replica's plans, the Pending board, and the FabricPlacement form of an entry.

Rule: pure. No kubernetes client, aiohttp, prometheus_client, threading or kopf, and nothing of the
extender's other layers: it writes through ``sink`` Protocols the API adapters implement.
"""

"""Every API-server adapter of the extender, in one place: the FabricPlacement store, writer
and watch, the reads of owners, Jobs and pods, pod Events, and the scheduler wake-up. Each call
goes through ``fabricsched.ports.errors.call``.

Rule: implements the Protocols of ``book`` and ``decide``; imports neither ``decide`` nor ``http``.
"""

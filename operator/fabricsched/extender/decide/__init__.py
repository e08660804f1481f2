"""The extender's decisions: filter and prioritize for one pod (``coordinator``), when a gang
may be planned (``admission``), its plan (``planning``, over the engine), the locality wait
(``locality``), and the owners and pods a decision must know (``owners``, ``pod_identity``).

Rule: no kubernetes client, aiohttp or threads; what it needs from the API server comes through
Protocols (``owners.OwnerFetcher``, ``owners.JobFetcher``, ``pod_identity.PodLookup``,
``book.sink``) that ``extender.kube`` implements and ``extender.service`` plugs in.
"""

"""The fabric page: a read-only picture of the fabrics, their health and the gangs on them.

Rule: below the adapters, above the seam. The page reads one typed read-only view
(``view.PageSource``) that the composition root builds over the process's in-memory state (the
extender's book and path index, the operator's snapshots and health), or that the simulator
builds over its final state; it never calls the API server. It imports no adapter, so both
``fabricsched run`` (``server``) and ``fabricsched simulate --report`` (``static_page``) can use it.

- ``view``: what the page reads (``PageSource``, ``FabricFacts``, ``GangFacts``, ``PendingFacts``);
- ``document``: the page's JSON document, built from a source at one version;
- ``query``: the data endpoint's query parameters, parsed with bounds;
- ``server``: the aiohttp app (page, static files, ``/api/state`` with ETags);
- ``assets``: the page's HTML, script and style (package data);
- ``static_page``: the same page as one self-contained HTML file.
"""

"""The FabricPlacement watch behind ``book.mirror``: the other replica's plans as they are written.

Through ``fabricsched.listwatch``, as the cluster state follows its kinds: the watch starts at the
resourceVersion of the restore's listing (``since``), lists only without one or after a 410, and
every object reaches ``book.mirror.PlanMirror`` on the event loop. A listing delivers its objects
as ``ADDED``; a relisting deletes nothing (a deleted object's gang is released by its Job's or
pods' end, never by the watch).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client

from fabricsched import listwatch
from fabricsched.api import placement as api
from fabricsched.extender.book import mirror

PATH = f"/apis/{api.GROUP}/{api.VERSION}/{api.PLURAL}"


class ApiPlacementFeed:
    """``mirror.PlacementFeed`` over the API server."""

    def __init__(self, api_client: client.ApiClient, covers: mirror.Covers,
                 since: Callable[[], str | None] = lambda: None, compression: bool = False) -> None:
        config = api_client.configuration
        self._connection = listwatch.Connection(lambda: listwatch.login_of(config), compression)
        self.covers = covers
        self._since = since
        """The version the objects were last listed at (the restore's), read when the watch starts."""

    async def follow(self, on_event: mirror.OnEvent) -> None:
        """Deliver every change since ``since`` (without it: every object first) to
        ``on_event`` until cancelled."""

        def apply(body: Mapping[str, Any]) -> None:
            on_event("ADDED", dict(body))

        kind = listwatch.Kind("fabricplacement", PATH, apply, lambda _key: None, lambda: ())
        try:
            await listwatch.Informer(self._connection, kind, since=self._since()).follow()
        finally:
            await self._connection.close()

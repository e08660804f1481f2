"""A gang's diagnosis for the fabric page, computed in the front process (``front``).

The page server (``dashboard.diagnosis``) decides when a diagnosis runs (cached, rate-limited
per gang and overall); this is what runs: ``diagnose``'s cluster reads with a client of the
front's own (a few GETs per report: the front has no watch), in a pool of ``READ_THREADS``
threads so the front's loop keeps serving, then Prometheus as the topology's
``spec.health.prometheus`` names it, under ``fabricsched run``'s access policy (the URL
allow-list and the credential directories its health rules obey). Everything it can fail on
becomes an answer with a status, never an exception out of the front.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from dataclasses import dataclass

from fabricsched.dashboard import diagnosis, ondemand
from fabricsched.diagnose import cluster, collect, model, nodes, queries, report
from fabricsched.explain import access as kube_access
from fabricsched.explain import bounds
from fabricsched.ports import errors
from fabricsched.telemetry import access

logger = logging.getLogger(__name__)
READ_THREADS = 2
"""As many as the page lets run at once (``ondemand.Limits.max_running``)."""


@dataclass(frozen=True)
class PageDiagnosis:
    """What the front needs to diagnose a gang (sent in its options frame)."""

    kubeconfig: str | None
    """``fabricsched run``'s kubeconfig; None: the pod's service account."""
    prometheus: access.AccessPolicy
    """``--prometheus-allow-url`` and ``--prometheus-credentials-dir``."""
    request_timeout_s: float = 5.0
    """Of one API read."""
    prometheus_budget_s: float = 30.0
    """Of all the Prometheus queries of one report together."""


class Diagnoser:
    """``dashboard.diagnosis.Diagnose`` over the cluster and Prometheus."""

    def __init__(self, options: PageDiagnosis) -> None:
        self.options = options
        self._pool = concurrent.futures.ThreadPoolExecutor(READ_THREADS, thread_name_prefix="diagnose")
        self._api: kube_access.Api | None = None
        self._connecting = threading.Lock()

    async def __call__(self, asked: diagnosis.GangAsked) -> ondemand.Reply:
        now = time.time()
        window = queries.window_of(now - asked.since_s, now)
        loop = asyncio.get_running_loop()
        try:
            read = await loop.run_in_executor(self._pool, self._read, asked, window)
        except errors.NotFound as e:
            return ondemand.Reply(404, {"error": bounds.clean(e, 300)})
        except kube_access.BadConfig as e:
            return ondemand.Reply(503, {"error": bounds.clean(e, 300)})
        except kube_access.ApiAccessError as e:
            return ondemand.Reply(502, {"error": bounds.clean(e, 300)})
        asking = collect.from_topology(read, self.options.prometheus)
        inputs = await collect.inputs(
            read, window, nodes.DEFAULT_LABELS, asking, self.options.prometheus_budget_s
        )
        return ondemand.Reply(200, report.as_data(report.build(inputs)))

    def _read(self, asked: diagnosis.GangAsked, window: model.Window) -> cluster.Read:
        """In a pool thread: the blocking client never runs on the front's loop."""
        with self._connecting:
            if self._api is None:
                self._api = kube_access.connect(self.options.kubeconfig, None, self.options.request_timeout_s)
            api = self._api
        return cluster.read(api, asked.namespace, asked.name, window)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._api is not None:
            self._api.close()

"""The demo's last act: a host under a running job goes bad, and ``fabricsched explain`` shows it.

Flow (after every job is bound): pick the widest running job and its rank 0 host ->
``fabricsched explain`` (the real CLI, as a user runs it) -> label the host
``fabricsched.io/fabric-health=degraded``, as a fabric team's tooling would -> wait until the
job's FabricPlacement lists the host on its unhealthy path -> ``fabricsched explain`` again.
The host stays degraded: docs/troubleshooting.md walks through this state.

Imports no controller or extender module, like the rest of the demo.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fabricsched.api import placement as placement_api
from fabricsched.cluster import errors, rest

HEALTH_LABEL = "fabricsched.io/fabric-health"
EXPLAIN_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Degradation:
    """What the last act did and what explain printed around it."""

    namespace: str
    job: str
    host: str
    before: str
    after: str
    seconds: float
    """From the label to the FabricPlacement listing the host."""

    def render(self) -> str:
        explain = f"fabricsched explain {self.namespace}/{self.job}"
        label = f"kubectl label node {self.host} {HEALTH_LABEL}=degraded"
        return "\n".join([
            f"==> Job {self.namespace}/{self.job} runs; its rank 0 host {self.host} is healthy:",
            f"$ {explain}",
            self.before.rstrip(),
            "",
            f"==> The host's fabric link goes bad: {label}",
            f"    (its FabricPlacement showed it {self.seconds:.1f} s later)",
            f"$ {explain}",
            self.after.rstrip(),
            "",
            f"The host stays degraded; undo: kubectl label node {self.host} {HEALTH_LABEL}-",
        ])


def widest(placements: Sequence[Mapping[str, Any]]) -> tuple[str, str] | None:
    """(job, rank 0 host) of the bound gang with the most pods (the first of equals), when it
    has more than one: a lone pod crosses no link."""
    best: tuple[int, str, str] | None = None
    for placement in placements:
        spec = placement.get("spec") or {}
        size = int(spec.get("size") or 0)
        ranks = {int(r.get("rank", -1)): str(r.get("node")) for r in spec.get("ranks") or ()}
        if size > 1 and 0 in ranks and (best is None or size > best[0]):
            best = (size, str(placement["metadata"]["name"]), ranks[0])
    return (best[1], best[2]) if best else None


def explain(kubeconfig: Path, namespace: str, name: str) -> str:
    """``fabricsched explain NAMESPACE/NAME``'s text, or its error line."""
    argv = [sys.executable, "-m", "fabricsched.cli", "explain", f"{namespace}/{name}",
            f"--kubeconfig={kubeconfig}"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=EXPLAIN_TIMEOUT_S, check=False)
    if done.returncode != 0:
        error = done.stderr.strip()[:300]
        raise errors.ClusterError(f"fabricsched explain exited {done.returncode}: {error}")
    return done.stdout


def run(api: rest.Client, kubeconfig: Path, namespace: str, placements: Sequence[Mapping[str, Any]],
        wait: Callable[[str, Callable[[], Any], float], Any], timeout: float) -> Degradation | None:
    """Degrade the widest job's rank 0 host and explain the job before and after; None when
    no job spans hosts."""
    chosen = widest(placements)
    if chosen is None:
        return None
    job, host = chosen
    before = explain(kubeconfig, namespace, job)
    api.call("PATCH", f"/api/v1/nodes/{host}", {"metadata": {"labels": {HEALTH_LABEL: "degraded"}}},
             rest.MERGE_PATCH)
    started = time.monotonic()
    path = f"/apis/{placement_api.API_VERSION}/namespaces/{namespace}/{placement_api.PLURAL}/{job}"

    def shown() -> bool:
        status = api.call("GET", path).get("status") or {}
        return bool(status.get("degradedPath")) and any(
            e.get("node") == host for e in status.get("unhealthyPath") or ()
        )

    wait(f"FabricPlacement {namespace}/{job} to list host {host} on its path", shown, timeout)
    seconds = time.monotonic() - started
    return Degradation(namespace, job, host, before, explain(kubeconfig, namespace, job), seconds)

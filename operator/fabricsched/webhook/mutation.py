"""Whether an admitted pod gets ``schedulerName: fabricsched``, and why (no I/O).

The namespace has been checked already: the API server calls the webhook only for namespaces
labelled ``fabricsched.io/scheduling=enabled`` (the configuration's ``namespaceSelector``), so
nothing here reads the cluster. A pod is changed only when all hold:

- the operation is CREATE (a pod's scheduler name cannot change afterwards);
- it asks for a GPU: a positive effective request of one of the GPU resources, counted as the
  kube-scheduler does (containers, init and sidecar containers; a limit alone counts as the
  request, as API defaulting makes it), or, with ``dra_claims``, it claims DRA devices
  (``spec.resourceClaims``: its GPUs may come from claims alone, docs/dra.md);
- its ``schedulerName`` is empty or ``default-scheduler``: another explicit scheduler is the
  user's choice and stays;
- it is not bound already (``spec.nodeName``): no scheduler sees such a pod.

The object is untrusted (the API server has not validated it yet: mutating admission runs
first), so a field of the wrong JSON type is a ``Decision`` that leaves the pod alone, with a
bounded reason for the log, never an exception.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fabricsched import parsing
from fabricsched.topology import nodes
from fabricsched.webhook import options as webhook_options

DEFAULT_SCHEDULER = "default-scheduler"


@dataclass(frozen=True)
class Decision:
    scheduler_name: str | None
    """The name to set; None leaves the pod as it is."""
    reason: str
    """Why, for the log (bounded: pod fields appear only as excerpts)."""
    malformed: bool = False
    """The object could not be read: worth a warning, not a debug line."""


def decide(operation: object, body: object, options: webhook_options.WebhookOptions) -> Decision:
    if operation != "CREATE":
        return Decision(None, f"operation {parsing.excerpt(operation)} is not CREATE")
    if body is None:
        return Decision(None, "unreadable pod: the request holds no object", malformed=True)
    try:
        pod = parsing.mapping(body, "pod")
        spec = parsing.mapping(pod.get("spec"), "spec")
        current = parsing.string(spec.get("schedulerName"), "spec.schedulerName")
        bound = parsing.string(spec.get("nodeName"), "spec.nodeName")
        requests = nodes.effective_requests(spec)
        claims = parsing.sequence(spec.get("resourceClaims"), "spec.resourceClaims")
    except ValueError as e:  # parsing.Invalid, and anything a quantity raises
        return Decision(None, f"unreadable pod: {parsing.truncate(str(e), 200)}", malformed=True)
    gpus = _gpu_request(requests, options.gpu_resources)
    if gpus is None and options.dra_claims and claims:
        gpus = ("DRA claims", len(claims))
    if gpus is None:
        return Decision(None, f"requests none of {', '.join(options.gpu_resources)}")
    if current not in ("", DEFAULT_SCHEDULER):
        if current == options.scheduler_name:
            return Decision(None, f"already names {options.scheduler_name}")
        return Decision(None, f"names another scheduler, {parsing.excerpt(current)}")
    if bound:
        return Decision(None, f"bound to {parsing.excerpt(bound)} at creation")
    return Decision(options.scheduler_name, f"requests {gpus[1]} {gpus[0]}")


def _gpu_request(requests: Mapping[str, Any], resources: tuple[str, ...]) -> tuple[str, int] | None:
    for name in resources:
        amount = requests.get(name, 0)
        if amount > 0:
            return name, amount
    return None

"""Which series belong to which node: by a list of labels, as the telemetry rules'
``targetLabel``/``targetRegex`` (pure).

Default: ``node`` (relabelled scrapes), the host part of ``instance`` (node_exporter's
``host:9100``), ``Hostname`` (dcgm-exporter) and ``kubernetes_node`` (the Prometheus Operator's
and many relabellings). The first label that is present and names one of the job's hosts wins.
The PromQL selector restricts every query to the job's hosts, so a query's answer is bounded by
the job's size, not the fleet's: a label with a regex is matched in PromQL as "the host name,
then nothing or a non-name character" (``gpu-001:9100``, ``gpu-001.cluster.local``), and the
regex then picks the node exactly.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from fabricsched.diagnose import model
from fabricsched.explain import bounds

NODE_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
"""A Kubernetes node name (DNS-1123 subdomain): the only names put into PromQL."""
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]{0,127}")
INSTANCE_REGEX = "([^:]+)(:[0-9]+)?"
"""The telemetry rules' default ``targetRegex``: ``host:9100`` -> ``host``."""
MAX_REGEX = 256
POD_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


@dataclass(frozen=True)
class NodeLabel:
    label: str
    regex: re.Pattern[str] | None = None

    @classmethod
    def parse(cls, text: str) -> NodeLabel:
        """``LABEL`` or ``LABEL=REGEX`` (a flag's value); ValueError naming what is wrong."""
        label, sep, regex = text.partition("=")
        if not LABEL_NAME.fullmatch(label):
            raise ValueError(f"{label[:64]!r} is not a Prometheus label name")
        if not sep:
            return cls(label)
        if not regex or len(regex) > MAX_REGEX:
            raise ValueError(f"the regex of {label} must have 1 to {MAX_REGEX} characters")
        try:
            return cls(label, re.compile(regex))
        except re.error as e:
            raise ValueError(f"the regex of {label} does not compile: {e}") from e

    def node_of(self, labels: Mapping[str, str]) -> str | None:
        raw = labels.get(self.label)
        if not raw:
            return None
        if self.regex is None:
            return raw
        match = self.regex.fullmatch(raw)
        if match is None:
            return None
        return (match.group(1) if self.regex.groups else match.group(0)) or None


DEFAULT_LABELS: tuple[NodeLabel, ...] = (
    NodeLabel("node"),
    NodeLabel("instance", re.compile(INSTANCE_REGEX)),
    NodeLabel("Hostname"),
    NodeLabel("kubernetes_node"),
)


def usable_hosts(hosts: Iterable[str]) -> list[str]:
    """The job's hosts that are valid node names (anything else never reaches PromQL)."""
    return sorted({h for h in hosts if NODE_NAME.fullmatch(h)})


def selectors(labels: Sequence[NodeLabel], hosts: Sequence[str]) -> list[str]:
    """One PromQL selector (``{label=~"..."}``) per label, each matching only the job's hosts."""
    names = "|".join(re.escape(h).replace("\\", "\\\\") for h in usable_hosts(hosts))
    if not names:
        return []
    out = []
    for entry in labels:
        pattern = f"({names})" if entry.regex is None else f"({names})([^-a-zA-Z0-9].*)?"
        out.append(f'{{{entry.label}=~"{pattern}"}}')
    return out


def pod_selector(namespace: str, pods: Iterable[str]) -> str | None:
    """dcgm-exporter's pod mapping: the job's namespace and pods."""
    names = sorted({p for p in pods if POD_NAME.fullmatch(p)})
    if not names or not NODE_NAME.fullmatch(namespace):
        return None
    alternatives = "|".join(re.escape(p).replace("\\", "\\\\") for p in names)
    return f'{{namespace="{namespace}",pod=~"({alternatives})"}}'


def node_of(
    labels: Mapping[str, str], order: Sequence[NodeLabel], hosts: set[str], pod_nodes: Mapping[str, str]
) -> str | None:
    """The job's host a series belongs to; None when it names none of them."""
    for entry in order:
        name = entry.node_of(labels)
        if name in hosts:
            return name
    pod = labels.get("pod")
    return pod_nodes.get(pod) if pod else None


def series_of(
    raw: Iterable[tuple[Mapping[str, str], Sequence[tuple[float, float]]]],
    detail_label: str | None,
    order: Sequence[NodeLabel],
    hosts: set[str],
    pod_nodes: Mapping[str, str],
) -> list[model.Series]:
    """The raw series mapped to the job's hosts (others dropped), one per (node, detail)."""
    kept: dict[tuple[str, str], model.Series] = {}
    for labels, points in raw:
        node = node_of(labels, order, hosts, pod_nodes)
        if node is None:
            continue
        # A label value is untrusted: no escape sequence reaches the terminal.
        detail = bounds.clean(labels.get(detail_label, ""), 64) if detail_label else ""
        if detail_label == "gpu" and detail:
            detail = f"GPU {detail}"
        key = (node, detail)
        if key not in kept:
            kept[key] = model.Series(node, detail, tuple(points))
    return sorted(kept.values(), key=lambda s: (s.node, s.detail))

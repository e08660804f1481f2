"""The documented default rules over node_exporter's port counters (docs/telemetry.md).

node_exporter's ``infiniband`` collector (on by default) exports one series per HCA port,
labelled ``device`` (e.g. ``mlx5_2``) and ``port``; from v1.11 it also exports the mlx5
``hw_counters`` (RoCE). Its ``instance`` label is the scrape address (``host:9100``) unless
relabelled. Thresholds are NVIDIA NVSentinel's NIC Health Monitor defaults where it publishes
one (its fatal counters become ``down`` here, and the IBTA BER limit of 1e-12, 120 symbol
errors an hour, becomes ``degraded``: a link out of spec still carries traffic, but a gang
should not depend on it); the opt-in RoCE congestion rules have no published default and use
fabricsched's own starting points, to be tuned against the fabric's baseline.

Every rule reads ``rate()``/``increase()`` over ``defaultRules.window`` so one scrape moves
nothing on its own; flap damping (``rules.Damper``) applies on top, as for any rule. Each rule
carries ``railLabel: device``, so on a rail-optimized fabric with ``railDevices`` a reading
concerns one rail, except the ethtool PFC rule: ethtool names the netdev (``eth2``), not the
RDMA device, so its reading concerns the whole host.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fabricsched.api import topology as api

ACTIVE = 4
"""``node_infiniband_state_id`` of an ACTIVE port (1 down, 2 init, 3 armed, 5 active-defer)."""

SYMBOL_ERRORS_PER_HOUR = 120.0
"""The IBTA bit error rate limit (1e-12) as symbol errors an hour (NVSentinel symbol_error_fatal)."""
LINK_ERROR_RECOVERIES_PER_MINUTE = 5.0
RECEIVE_ERRORS_PER_SECOND = 10.0
TRANSMIT_DISCARDS_PER_SECOND = 100.0
ROCE_SLOW_RESTARTS_PER_SECOND = 10.0
OUT_OF_SEQUENCE_PER_SECOND = 100.0
CNPS_HANDLED_PER_SECOND = 20000.0
PFC_PAUSES_PER_SECOND = 1000.0

Kind = Literal["increase", "rate", "gauge"]


@dataclass(frozen=True)
class Default:
    """One default rule: a node_exporter metric, how it is read and when it fires."""

    name: str
    metric: str
    kind: Kind
    comparison: api.Comparison
    threshold: float
    state: Literal["degraded", "down"]
    per: float = 1.0
    """``rate()`` is per second; the value is multiplied by this (60: per minute)."""
    rail_label: str | None = "device"
    source: str = "NVSentinel NIC Health Monitor default"

    def query(self, selector: str, window: str) -> str:
        series = f"{self.metric}{selector}"
        if self.kind == "gauge":
            return series
        read = f"{self.kind}({series}[{window}])"
        return f"{read} * {self.per:g}" if self.per != 1.0 else read


BUILTIN: tuple[Default, ...] = (
    Default("ib-link-downed", "node_infiniband_link_downed_total", "increase", ">", 0, "down"),
    Default("ib-link-integrity-errors", "node_infiniband_local_link_integrity_errors_total", "increase",
            ">", 0, "down"),
    Default("ib-buffer-overrun-errors", "node_infiniband_excessive_buffer_overrun_errors_total", "increase",
            ">", 0, "down"),
    Default("ib-port-not-active", "node_infiniband_state_id", "gauge", "!=", ACTIVE, "down",
            source="IBTA port states (node_exporter state_id)"),
    Default("ib-symbol-errors", "node_infiniband_symbol_error_total", "rate", ">", SYMBOL_ERRORS_PER_HOUR,
            "degraded", per=3600, source="IBTA BER 1e-12 (NVSentinel symbol_error_fatal)"),
    Default("ib-link-error-recovery", "node_infiniband_link_error_recovery_total", "rate", ">",
            LINK_ERROR_RECOVERIES_PER_MINUTE, "degraded", per=60),
    Default("ib-port-receive-errors", "node_infiniband_port_errors_received_total", "rate", ">",
            RECEIVE_ERRORS_PER_SECOND, "degraded"),
    Default("ib-port-transmit-discards", "node_infiniband_port_discards_transmitted_total", "rate", ">",
            TRANSMIT_DISCARDS_PER_SECOND, "degraded"),
)
"""Evaluated unless ``defaultRules.enabled: false`` (plus ``ib-link-rate``, built per spec)."""

OPT_IN: tuple[Default, ...] = (
    Default("roce-slow-restart", "node_infiniband_roce_slow_restart_total", "rate", ">",
            ROCE_SLOW_RESTARTS_PER_SECOND, "degraded"),
    Default("roce-out-of-sequence", "node_infiniband_out_of_sequence_packets_received_total", "rate", ">",
            OUT_OF_SEQUENCE_PER_SECOND, "degraded", source="fabricsched starting point"),
    Default("roce-cnp-storm", "node_infiniband_rp_cnp_packets_handled_total", "rate", ">",
            CNPS_HANDLED_PER_SECOND, "degraded", source="fabricsched starting point"),
    Default("roce-pfc-pause", "node_ethtool_received_prio3_pause", "rate", ">", PFC_PAUSES_PER_SECOND,
            "degraded", rail_label=None, source="fabricsched starting point"),
)
"""Evaluated when named in ``defaultRules.include`` (RoCE fabrics; node_exporter >= 1.11, and
the ethtool collector for PFC)."""


def expected_rate_bytes(spec: api.FabricTopologySpec) -> float:
    """The rate a healthy NIC trains to: one NIC per GPU at ``gpuBandwidthGbps`` (bytes/s, as
    node_exporter reports it: 400 Gbit/s -> 50e9)."""
    return spec.gpu_bandwidth_gbps * 1e9 / 8


def default_rules(spec: api.FabricTopologySpec, options: api.DefaultRulesSpec) -> list[api.TelemetryRule]:
    sel = "{" + options.selector + "}" if options.selector else ""
    common = {"target": "node", "target_label": options.target_label, "target_regex": options.target_regex}
    chosen = list(BUILTIN) + [d for d in OPT_IN if d.name in options.include]
    out = [
        api.TelemetryRule(name=d.name, query=d.query(sel, options.window), comparison=d.comparison,
                          threshold=d.threshold, state=d.state, rail_label=d.rail_label, **common)
        for d in chosen
    ]
    # Below the expected rate: degraded, the measured fraction as capacity (a 4x port trained to 1x: 0.25).
    out.append(api.TelemetryRule(
        name="ib-link-rate",
        query=f"node_infiniband_rate_bytes_per_second{sel} / {expected_rate_bytes(spec):g}",
        comparison="<", threshold=1, state="degraded", capacity_from_value=True, rail_label="device",
        **common,
    ))
    return out

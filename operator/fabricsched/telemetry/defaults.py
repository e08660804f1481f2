"""The documented default rules: node_exporter's InfiniBand collector (docs/telemetry.md).

node_exporter exports one series per HCA port, labelled ``device`` (e.g. ``mlx5_2``) and
``port``; its ``instance`` label is the scrape address (``host:9100``) unless relabelled. The
metric names below are those of node_exporter's ``infiniband`` collector:

- ``node_infiniband_symbol_error_total``: minor link errors on a physical lane, the first sign of
  a bad cable or transceiver;
- ``node_infiniband_link_downed_total``: times the link failed to recover and went down;
- ``node_infiniband_state_id``: logical port state, 4 = ACTIVE;
- ``node_infiniband_rate_bytes_per_second``: the rate the port trained to (a 4x link that trained
  down to 1x shows a quarter of the expected rate).

Each rule carries ``railLabel: device``, so on a rail-optimized fabric with ``railDevices`` a
reading concerns one rail (a host with one of R rails bad keeps (R-1)/R of its bandwidth).
"""

from __future__ import annotations

from fabricsched.api import topology as api

SYMBOL_ERRORS_PER_MINUTE = 1.0
"""A healthy HDR/NDR link sees almost no symbol errors; more than one a minute, sustained over
the window, is a link to replace, not noise."""

ACTIVE = 4
"""``node_infiniband_state_id`` of an ACTIVE port (1 down, 2 init, 3 armed, 5 active-defer)."""


def expected_rate_bytes(spec: api.FabricTopologySpec) -> float:
    """The rate a healthy NIC trains to: one NIC per GPU at ``gpuBandwidthGbps`` (bytes/s, as
    node_exporter reports it: 400 Gbit/s -> 50e9)."""
    return spec.gpu_bandwidth_gbps * 1e9 / 8


def default_rules(spec: api.FabricTopologySpec, options: api.DefaultRulesSpec) -> list[api.TelemetryRule]:
    sel = "{" + options.selector + "}" if options.selector else ""
    w = options.window
    common = {"target": "node", "target_label": options.target_label,
              "target_regex": options.target_regex, "rail_label": "device"}
    return [
        api.TelemetryRule(
            name="ib-symbol-errors",
            query=f"rate(node_infiniband_symbol_error_total{sel}[{w}]) * 60",
            comparison=">", threshold=SYMBOL_ERRORS_PER_MINUTE, state="degraded", **common,
        ),
        api.TelemetryRule(
            name="ib-link-downed",
            query=f"increase(node_infiniband_link_downed_total{sel}[{w}])",
            comparison=">", threshold=0, state="degraded", **common,
        ),
        api.TelemetryRule(
            name="ib-port-not-active",
            query=f"node_infiniband_state_id{sel}",
            comparison="!=", threshold=ACTIVE, state="down", **common,
        ),
        api.TelemetryRule(
            name="ib-link-rate",
            query=f"node_infiniband_rate_bytes_per_second{sel} / {expected_rate_bytes(spec):g}",
            comparison="<", threshold=1, state="degraded", capacity_from_value=True, **common,
        ),
    ]

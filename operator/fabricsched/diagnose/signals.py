"""The signals a diagnosis reads: the standard exporters' metric names and how each is judged.

Pure data. Each ``Signal`` names one metric of a standard exporter, how to read it (a counter's
rate or increase, a gauge, a bit mask), the label naming the element on the node (the NIC, the
GPU, the disk) and when one point counts as abnormal:

- ``above`` / ``below``: an absolute limit (a link that went down, a port that trained down);
- ``peer-above`` / ``peer-below``: relative to the job's other elements at the same time and to
  the element's own start of window (PortXmitWait ticks have a hardware-defined length, SM clocks
  differ by model: only a comparison means something);
- ``bits``: any of ``mask``'s bits set (NVML clock event reasons).

Sources (the names below are theirs):

- node_exporter's ``infiniband`` collector (on by default; the RoCE ``hw_counters`` from v1.11):
  https://github.com/prometheus/node_exporter/blob/master/collector/infiniband_linux.go
- node_exporter's ``ethtool`` collector (off by default: ``--collector.ethtool``), PFC pauses:
  https://github.com/prometheus/node_exporter/blob/master/collector/ethtool_linux.go
- node_exporter's ``pressure`` (PSI), ``diskstats``, ``nfs`` and ``mountstats`` (off by
  default) collectors: https://github.com/prometheus/node_exporter#collectors
- NVIDIA dcgm-exporter (``etc/default-counters.csv``; the ``DCGM_FI_PROF_*`` fields need the DCP
  counter set, the clock event reasons are not in the default set):
  https://github.com/NVIDIA/dcgm-exporter and the DCGM field ids,
  https://docs.nvidia.com/datacenter/dcgm/latest/dcgm-api/dcgm-api-field-ids.html; the reason bits
  are NVML's, https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fabricsched.diagnose import model

Read = Literal["rate", "increase", "gauge"]
Judge = Literal["above", "below", "peer-above", "peer-below", "bits"]

NODE_EXPORTER_DOC = "https://github.com/prometheus/node_exporter#collectors"
INFINIBAND_DOC = "https://github.com/prometheus/node_exporter/blob/master/collector/infiniband_linux.go"
DCGM_DOC = "https://docs.nvidia.com/datacenter/dcgm/latest/dcgm-api/dcgm-api-field-ids.html"
NVML_REASONS_DOC = "https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html"

CLOCK_EVENT_METRICS = "DCGM_FI_DEV_CLOCKS_EVENT_REASONS|DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"
"""dcgm-exporter's name for the reasons mask since DCGM 3.3, and the one before it."""
HW_SLOWDOWN, SW_THERMAL, HW_THERMAL, HW_POWER_BRAKE, SW_POWER_CAP = 0x8, 0x20, 0x40, 0x80, 0x4
ACTIVE = 4
"""``node_infiniband_state_id`` of an ACTIVE port."""


@dataclass(frozen=True)
class Signal:
    key: str
    category: model.Category
    title: str
    """How the evidence names it: 'port transmit wait'."""
    metric: str
    """The metric name, or an alternation of names (a regex on ``__name__``)."""
    read: Read
    judge: Judge
    limit: float
    """The absolute limit, the factor over (under) the peers, or the bit mask."""
    unit: str
    doc: str
    weight: float
    """How strongly this signal alone points at its cause, 0..1 (a downed link: 1)."""
    detail: str | None = None
    """Label naming the element on the node: device, gpu; None for a whole-host series."""
    per: float = 1.0
    """A rate is per second; multiplied by this (3600: per hour)."""
    floor: float = 0.0
    """For peer judges: values at or under this are never abnormal (idle noise)."""
    gpu: bool = False
    """A dcgm-exporter series: also matched by the job's namespace and pods."""
    note: str = ""
    """Why it may be missing (a collector off by default, a counter set)."""

    def expression(self, selector: str, range_s: int) -> str:
        """The PromQL for one selector (``{...}``): the signal's read over ``range_s``."""
        name = (
            f'{{__name__=~"{self.metric}",{selector[1:]}'
            if "|" in self.metric
            else f"{self.metric}{selector}"
        )
        if self.read == "gauge":
            return name
        scaled = f" * {self.per:g}" if self.per != 1.0 else ""
        return f"{self.read}({name}[{range_s}s]){scaled}"


SIGNALS: tuple[Signal, ...] = (
    # fabric: node_exporter infiniband collector (one series per HCA port, labels device, port)
    Signal(
        "ib-symbol-errors",
        "fabric",
        "symbol errors",
        "node_infiniband_symbol_error_total",
        "rate",
        "above",
        120.0,
        "/h",
        INFINIBAND_DOC,
        0.8,
        "device",
        per=3600,
    ),
    Signal(
        "ib-link-downed",
        "fabric",
        "link downed",
        "node_infiniband_link_downed_total",
        "increase",
        "above",
        0.0,
        "",
        INFINIBAND_DOC,
        1.0,
        "device",
    ),
    Signal(
        "ib-link-error-recovery",
        "fabric",
        "link error recovery",
        "node_infiniband_link_error_recovery_total",
        "increase",
        "above",
        0.0,
        "",
        INFINIBAND_DOC,
        0.7,
        "device",
    ),
    Signal(
        "ib-port-state",
        "fabric",
        "port not ACTIVE",
        "node_infiniband_state_id",
        "gauge",
        "below",
        ACTIVE,
        "state",
        INFINIBAND_DOC,
        1.0,
        "device",
    ),
    Signal(
        "ib-port-rate",
        "fabric",
        "port rate",
        "node_infiniband_rate_bytes_per_second",
        "gauge",
        "peer-below",
        0.9,
        "B/s",
        INFINIBAND_DOC,
        0.9,
        "device",
    ),
    Signal(
        "ib-receive-errors",
        "fabric",
        "port receive errors",
        "node_infiniband_port_errors_received_total",
        "rate",
        "above",
        10.0,
        "/s",
        INFINIBAND_DOC,
        0.7,
        "device",
    ),
    Signal(
        "ib-transmit-wait",
        "fabric",
        "port transmit wait",
        "node_infiniband_port_transmit_wait_total",
        "rate",
        "peer-above",
        3.0,
        "ticks/s",
        INFINIBAND_DOC,
        0.8,
        "device",
        floor=1000.0,
    ),
    Signal(
        "roce-cnp-handled",
        "fabric",
        "CNPs handled",
        "node_infiniband_rp_cnp_packets_handled_total",
        "rate",
        "peer-above",
        3.0,
        "/s",
        INFINIBAND_DOC,
        0.6,
        "device",
        floor=100.0,
        note="mlx5 hw_counters: node_exporter >= 1.11, RoCE only",
    ),
    Signal(
        "roce-out-of-sequence",
        "fabric",
        "out of sequence packets",
        "node_infiniband_out_of_sequence_packets_received_total",
        "rate",
        "above",
        100.0,
        "/s",
        INFINIBAND_DOC,
        0.6,
        "device",
        note="mlx5 hw_counters: node_exporter >= 1.11, RoCE only",
    ),
    Signal(
        "roce-pfc-pause",
        "fabric",
        "PFC pause frames received",
        "node_ethtool_received_prio3_pause",
        "rate",
        "peer-above",
        3.0,
        "/s",
        NODE_EXPORTER_DOC,
        0.6,
        "device",
        floor=1000.0,
        note="ethtool collector, off by default (--collector.ethtool)",
    ),
    # gpu: dcgm-exporter (labels gpu, UUID, Hostname; namespace, pod when it maps pods)
    Signal(
        "gpu-thermal",
        "gpu",
        "thermal throttling",
        CLOCK_EVENT_METRICS,
        "gauge",
        "bits",
        SW_THERMAL | HW_THERMAL,
        "mask",
        NVML_REASONS_DOC,
        1.0,
        "gpu",
        gpu=True,
        note="not in dcgm-exporter's default counters: add DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
    ),
    Signal(
        "gpu-hw-slowdown",
        "gpu",
        "HW slowdown",
        CLOCK_EVENT_METRICS,
        "gauge",
        "bits",
        HW_SLOWDOWN | HW_POWER_BRAKE,
        "mask",
        NVML_REASONS_DOC,
        1.0,
        "gpu",
        gpu=True,
        note="not in dcgm-exporter's default counters (SM clock and power are read instead)",
    ),
    Signal(
        "gpu-power-cap",
        "gpu",
        "power capping",
        CLOCK_EVENT_METRICS,
        "gauge",
        "bits",
        SW_POWER_CAP,
        "mask",
        NVML_REASONS_DOC,
        0.5,
        "gpu",
        gpu=True,
        note="not in dcgm-exporter's default counters",
    ),
    Signal(
        "gpu-sm-clock",
        "gpu",
        "SM clock",
        "DCGM_FI_DEV_SM_CLOCK",
        "gauge",
        "peer-below",
        0.8,
        "MHz",
        DCGM_DOC,
        0.7,
        "gpu",
        gpu=True,
    ),
    Signal(
        "gpu-power",
        "gpu",
        "power draw",
        "DCGM_FI_DEV_POWER_USAGE",
        "gauge",
        "peer-below",
        0.7,
        "W",
        DCGM_DOC,
        0.4,
        "gpu",
        gpu=True,
    ),
    Signal(
        "gpu-temperature",
        "gpu",
        "GPU temperature",
        "DCGM_FI_DEV_GPU_TEMP",
        "gauge",
        "above",
        85.0,
        "C",
        DCGM_DOC,
        0.5,
        "gpu",
        gpu=True,
    ),
    Signal(
        "gpu-xid",
        "gpu",
        "XID errors",
        "DCGM_FI_DEV_XID_ERRORS",
        "gauge",
        "above",
        0.0,
        "xid",
        DCGM_DOC,
        0.9,
        "gpu",
        gpu=True,
    ),
    Signal(
        "gpu-engine-active",
        "gpu",
        "graphics engine activity",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "gauge",
        "peer-below",
        0.6,
        "ratio",
        DCGM_DOC,
        0.3,
        "gpu",
        gpu=True,
        note="a DCP field: dcgm-exporter's profiling counter set",
    ),
    Signal(
        "gpu-nvlink",
        "gpu",
        "NVLink bandwidth",
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "gauge",
        "peer-below",
        0.5,
        "MB/s",
        DCGM_DOC,
        0.3,
        "gpu",
        gpu=True,
    ),
    # host: node_exporter pressure collector (PSI; seconds stalled per second = share of time)
    Signal(
        "host-cpu-pressure",
        "host",
        "CPU pressure",
        "node_pressure_cpu_waiting_seconds_total",
        "rate",
        "above",
        0.25,
        "share",
        NODE_EXPORTER_DOC,
        0.7,
    ),
    Signal(
        "host-memory-pressure",
        "host",
        "memory pressure",
        "node_pressure_memory_stalled_seconds_total",
        "rate",
        "above",
        0.1,
        "share",
        NODE_EXPORTER_DOC,
        0.8,
    ),
    Signal(
        "host-io-pressure",
        "host",
        "I/O pressure",
        "node_pressure_io_stalled_seconds_total",
        "rate",
        "above",
        0.2,
        "share",
        NODE_EXPORTER_DOC,
        0.6,
    ),
    # storage: diskstats (busy time), nfs (client RPCs), mountstats (off by default)
    Signal(
        "storage-disk-busy",
        "storage",
        "disk busy",
        "node_disk_io_time_seconds_total",
        "rate",
        "above",
        0.8,
        "share",
        NODE_EXPORTER_DOC,
        0.8,
        "device",
    ),
    Signal(
        "storage-nfs-retransmissions",
        "storage",
        "NFS RPC retransmissions",
        "node_nfs_rpc_retransmissions_total",
        "rate",
        "above",
        1.0,
        "/s",
        NODE_EXPORTER_DOC,
        0.7,
    ),
    Signal(
        "storage-nfs-queue",
        "storage",
        "NFS queue time",
        "node_mountstats_nfs_operations_queue_time_seconds_total",
        "rate",
        "above",
        1.0,
        "s/s",
        NODE_EXPORTER_DOC,
        0.7,
        "export",
        note="mountstats collector, off by default (--collector.mountstats)",
    ),
)

BY_KEY = {s.key: s for s in SIGNALS}


def of(key: str) -> Signal:
    return BY_KEY[key]

"""Real-looking telemetry history for ``fabricsched diagnose``, without a GPU cluster (pure).

``generate`` writes one scenario's series as OpenMetrics text with timestamps: node_exporter's
InfiniBand, PSI, disk and NFS series per host (``instance="HOST:9100"``), dcgm-exporter's GPU
series (``Hostname``, ``gpu``, and ``namespace``/``pod`` when the job's pods are given), and the
job's step time (``train_step_seconds{namespace, pod}``), one point every ``step_s`` over
``minutes`` ending at ``end``. Backfill it into a Prometheus with
``promtool tsdb create-blocks-from openmetrics FILE DATA_DIR`` (docs/diagnose.md#try-it).

The scenarios (the cause ``diagnose`` must name first):

- ``congested-uplink``: the hosts of the job's last leaf wait to transmit (PortXmitWait) from 30 %
  of the window on; the step time doubles. Cause: fabric, that leaf's uplinks.
- ``link-errors-then-down``: the first host's ``mlx5_1`` counts rising symbol errors from 25 %,
  then goes down at 60 % (link downed, port state DOWN). Cause: fabric, that host's link.
- ``gpu-thermal``: GPU 3 of the second host throttles (HW thermal reason, 91 C, SM clock and
  power down) from 35 %; that rank is the slowest. Cause: gpu, that GPU.
- ``storage-saturated``: every host's disk is busy, I/O pressure high, NFS retransmitting from
  40 %. Cause: storage.
- ``application``: nothing moves but the step time (1.4x from 50 %). Cause: application.
- ``fabric-recovered``: the congested uplink of the first scenario from 20 % to 50 % of the
  window, then normal again, and so is the step time. Cause: fabric, recovered.
"""

from __future__ import annotations

import functools
import random
import re
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

SCENARIOS = (
    "congested-uplink",
    "link-errors-then-down",
    "gpu-thermal",
    "storage-saturated",
    "application",
    "fabric-recovered",
)
DEVICES = ("mlx5_0", "mlx5_1")
GPUS = 4
MODEL = "NVIDIA H100 80GB HBM3"
STEP_METRIC = "train_step_seconds"
RATE_BYTES = 50e9
MAX_HOSTS = 64
MAX_POINTS = 20_000
_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


@dataclass(frozen=True)
class ScenarioLayout:
    """The job: its hosts in rank order with their leaf, and its pods by host (optional)."""

    hosts: Sequence[tuple[str, str]]
    pods: Mapping[str, tuple[str, str]]
    """Host -> (namespace, pod)."""


Point = tuple[float, float]
Family = tuple[str, str, str]
"""(name, type, help)."""


class _Writer:
    def __init__(self) -> None:
        self.families: dict[str, tuple[Family, list[tuple[str, list[Point]]]]] = {}

    def series(self, family: Family, labels: Mapping[str, str], points: list[Point]) -> None:
        entry = self.families.setdefault(family[0], (family, []))
        rendered = ",".join(f'{k}="{v}"' for k, v in labels.items())
        entry[1].append((rendered, points))

    def text(self) -> str:
        lines: list[str] = []
        for (name, kind, help_text), series in self.families.values():
            family = name.removesuffix("_total") if kind == "counter" else name
            lines += [f"# HELP {family} {help_text}", f"# TYPE {family} {kind}"]
            for labels, points in series:
                lines += [f"{name}{{{labels}}} {v:.6g} {t:.3f}" for t, v in points]
        return "\n".join([*lines, "# EOF"]) + "\n"


def generate(
    scenario: str, layout: ScenarioLayout, end: float, minutes: int = 30, step_s: int = 15, seed: int = 7
) -> str:
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    if not layout.hosts or len(layout.hosts) > MAX_HOSTS:
        raise ValueError(f"between 1 and {MAX_HOSTS} hosts")
    count = minutes * 60 // step_s + 1
    if count > MAX_POINTS or step_s < 1:
        raise ValueError(f"at most {MAX_POINTS} points a series (minutes x 60 / step)")
    times = [end - (count - 1 - i) * step_s for i in range(count)]

    rng = random.Random(seed)
    out = _Writer()
    effects = _Effects(scenario, layout, times[0], end)
    for host, _leaf in layout.hosts:
        _host(out, host, times, effects, rng)
        _gpus(out, host, layout.pods.get(host), times, effects, rng)
    for host, (namespace, pod) in layout.pods.items():
        out.series(
            (STEP_METRIC, "gauge", "Seconds per training step, per rank"),
            {"namespace": namespace, "pod": pod, "job": "train"},
            [(t, (1.0 + rng.uniform(-0.02, 0.02)) * effects.step(host, t)) for t in times],
        )
    return out.text()


SLOWDOWNS = {
    "congested-uplink": (0.3, 1.01, 2.1),
    "fabric-recovered": (0.2, 0.5, 2.0),
    "link-errors-then-down": (0.25, 1.01, 1.8),
    "gpu-thermal": (0.35, 1.01, 1.6),
    "storage-saturated": (0.4, 1.01, 1.8),
    "application": (0.5, 1.01, 1.4),
}
"""Scenario -> (from, to) as shares of the window, and how many times slower the step is then."""
CONGESTED = {"congested-uplink": (0.3, 1.01), "fabric-recovered": (0.2, 0.5)}


class _Effects:
    """What a scenario changes, as functions of (element, time)."""

    def __init__(self, scenario: str, layout: ScenarioLayout, start: float, end: float) -> None:
        self.scenario = scenario
        self.start, self.span = start, max(end - start, 1e-9)
        hosts = [h for h, _ in layout.hosts]
        last_leaf = layout.hosts[-1][1]
        self.congested = {h for h, leaf in layout.hosts if leaf == last_leaf}
        self.first, self.second = hosts[0], hosts[min(1, len(hosts) - 1)]

    def share(self, t: float) -> float:
        return (t - self.start) / self.span

    def _during(self, t: float, a: float, b: float) -> bool:
        return a <= self.share(t) < b

    def xmit_wait(self, host: str, t: float) -> float:
        window = CONGESTED.get(self.scenario)
        return 40_000.0 if window and host in self.congested and self._during(t, *window) else 500.0

    def _broken_port(self, host: str, device: str) -> bool:
        return self.scenario == "link-errors-then-down" and host == self.first and device == "mlx5_1"

    def symbol_rate(self, host: str, device: str, t: float) -> float:
        if not self._broken_port(host, device) or self.share(t) < 0.25:
            return 0.0
        return 0.05 + 2.0 * (self.share(t) - 0.25)

    def down(self, host: str, device: str, t: float) -> bool:
        return self._broken_port(host, device) and self.share(t) >= 0.6

    def hot(self, host: str, gpu: int, t: float) -> bool:
        return self.scenario == "gpu-thermal" and host == self.second and gpu == 3 and self.share(t) >= 0.35

    def storage(self, t: float) -> bool:
        return self.scenario == "storage-saturated" and self.share(t) >= 0.4

    def level(self, normal: float, busy: float, t: float) -> float:
        return busy if self.storage(t) else normal

    def step(self, host: str, t: float) -> float:
        a, b, factor = SLOWDOWNS[self.scenario]
        if not self._during(t, a, b):
            return 1.0
        return factor + (0.2 if self.scenario == "gpu-thermal" and host == self.second else 0.0)


def _counter(
    times: Sequence[float], rate: Callable[[float], float], rng: random.Random, jitter: float = 0.05
) -> list[Point]:
    """A counter growing at ``rate(t)`` per second (with a little noise), as a scrape reads it."""
    value, last = 0.0, times[0]
    out: list[Point] = []
    for t in times:
        value += max(0.0, rate(t) * (1 + rng.uniform(-jitter, jitter))) * (t - last)
        last = t
        out.append((t, float(round(value))))
    return out


def _host(out: _Writer, host: str, times: Sequence[float], fx: _Effects, rng: random.Random) -> None:
    base = {"instance": f"{host}:9100", "job": "node"}
    flat = [(t, 0.0) for t in times]
    for device in DEVICES:
        labels = {**base, "device": device, "port": "1"}
        out.series(
            ("node_infiniband_port_transmit_wait_total", "counter", "PortXmitWait ticks"),
            labels,
            _counter(times, lambda t: fx.xmit_wait(host, t), rng),
        )
        out.series(
            ("node_infiniband_symbol_error_total", "counter", "Symbol errors"),
            labels,
            _counter(times, functools.partial(fx.symbol_rate, host, device), rng),
        )
        out.series(
            ("node_infiniband_link_downed_total", "counter", "Link downed"),
            labels,
            [(t, 1.0 if fx.down(host, device, t) else 0.0) for t in times],
        )
        out.series(
            ("node_infiniband_link_error_recovery_total", "counter", "Link error recovery"), labels, flat
        )
        out.series(
            ("node_infiniband_port_errors_received_total", "counter", "Port receive errors"), labels, flat
        )
        out.series(
            ("node_infiniband_state_id", "gauge", "Port state (4: ACTIVE)"),
            labels,
            [(t, 1.0 if fx.down(host, device, t) else 4.0) for t in times],
        )
        out.series(
            ("node_infiniband_rate_bytes_per_second", "gauge", "Port rate"),
            labels,
            [(t, RATE_BYTES) for t in times],
        )
    for name, normal, busy in (
        ("node_pressure_cpu_waiting_seconds_total", 0.02, 0.02),
        ("node_pressure_memory_stalled_seconds_total", 0.001, 0.001),
        ("node_pressure_io_stalled_seconds_total", 0.01, 0.45),
        ("node_nfs_rpc_retransmissions_total", 0.0, 5.0),
    ):
        out.series(
            (name, "counter", "node_exporter pressure / nfs"),
            base,
            _counter(times, functools.partial(fx.level, normal, busy), rng),
        )
    out.series(
        ("node_disk_io_time_seconds_total", "counter", "Disk busy seconds"),
        {**base, "device": "nvme0n1"},
        _counter(times, lambda t: 0.97 if fx.storage(t) else 0.1, rng, jitter=0.02),
    )


GPU_GAUGES = (
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock (MHz)", 1980.0, 1100.0, 0.01),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (W)", 650.0, 420.0, 0.03),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (C)", 62.0, 91.0, 0.02),
    ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "Clock event reasons (64: HW thermal)", 0.0, 64.0, 0.0),
    ("DCGM_FI_DEV_XID_ERRORS", "Last XID error", 0.0, 0.0, 0.0),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Graphics engine active", 0.92, 0.9, 0.02),
)
"""dcgm-exporter gauges: name, help, normal value, value while thermal throttling, noise."""


def _gpus(
    out: _Writer,
    host: str,
    pod: tuple[str, str] | None,
    times: Sequence[float],
    fx: _Effects,
    rng: random.Random,
) -> None:
    for gpu in range(GPUS):
        uuid = f"GPU-{zlib.crc32(f'{host}/{gpu}'.encode()):08x}"
        labels = {
            "gpu": str(gpu),
            "UUID": uuid,
            "Hostname": host,
            "modelName": MODEL,
            "device": f"nvidia{gpu}",
        }
        if pod is not None:
            labels |= {"namespace": pod[0], "pod": pod[1], "container": "trainer"}
        for name, help_text, normal, throttled, noise in GPU_GAUGES:
            values = [
                (t, (throttled if fx.hot(host, gpu, t) else normal) * (1 + rng.uniform(-noise, noise)))
                for t in times
            ]
            out.series((name, "gauge", help_text), labels, values)


def layout_from(hosts: Iterable[str], pods: Iterable[str]) -> ScenarioLayout:
    """From ``HOST=LEAF`` and ``HOST=NAMESPACE/POD`` flag values; ValueError naming a bad one."""
    pairs = []
    for text in hosts:
        host, sep, leaf = text.partition("=")
        if not sep or not _NAME.fullmatch(host) or not _NAME.fullmatch(leaf):
            raise ValueError(f"--host {text[:64]!r}: expected HOST=LEAF (Kubernetes names)")
        pairs.append((host, leaf))
    by_host = {}
    for text in pods:
        host, sep, ref = text.partition("=")
        namespace, slash, pod = ref.partition("/")
        if not sep or not slash or not all(_NAME.fullmatch(n) for n in (host, namespace, pod)):
            raise ValueError(f"--pod {text[:64]!r}: expected HOST=NAMESPACE/POD")
        by_host[host] = (namespace, pod)
    return ScenarioLayout(tuple(pairs), by_host)

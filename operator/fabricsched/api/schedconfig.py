"""The KubeSchedulerConfiguration of the second kube-scheduler (profile ``fabricsched``).

One template (``kube-scheduler-config.yaml.tmpl`` beside this module) and one renderer serve
``fabricsched cluster up`` and the Helm chart (whose tests compare the chart's rendering with
this one); only the kubeconfig path, the extender URL, the lease namespace, the GPU
resources the extender manages and the optional mutual TLS differ, so they are its only
placeholders (``string.Template`` syntax, which the chart fills with ``replace``). Here, next
to the extender's wire types, because the configuration is the other half of that contract and
both adapters read it.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

TEMPLATE_NAME = "kube-scheduler-config.yaml.tmpl"
SCHEDULER_NAME = "fabricsched"
DEFAULT_EXTENDER_URL = "http://127.0.0.1:8888"
DEFAULT_LEASE_NAMESPACE = "kube-system"
DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"
"""What a FabricTopology's ``spec.gpuResource`` defaults to."""

# An extended resource name: a DNS subdomain prefix, a slash, a name (Kubernetes' qualified name).
_RESOURCE_NAME = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_MAX_RESOURCE_NAME = 253 + 1 + 63


def gpu_resources(names: Sequence[str]) -> tuple[str, ...]:
    """``names`` checked and without repeats, first occurrence kept (the chart's ``uniq``)."""
    unique: list[str] = []
    for name in names:
        if len(name) > _MAX_RESOURCE_NAME or not _RESOURCE_NAME.match(name):
            raise ValueError(f"not an extended resource name like nvidia.com/gpu: {name[:80]!r}")
        if name not in unique:
            unique.append(name)
    if not unique:
        raise ValueError("at least one GPU resource name is needed")
    return tuple(unique)


@dataclass(frozen=True)
class ExtenderTLS:
    """Files of the scheduler's side of mutual TLS with the extender."""

    ca_file: str
    """The CA that signed the extender's serving certificate."""
    cert_file: str
    """The scheduler's client certificate, signed by a CA the extender trusts."""
    key_file: str

    def __post_init__(self) -> None:
        if not (self.ca_file and self.cert_file and self.key_file):
            raise ValueError("extender TLS needs a CA file, a certificate file and a key file")

    def as_json(self) -> str:
        """One line of JSON, byte for byte what the chart's ``toJson`` prints: keys sorted."""
        files = {"caFile": self.ca_file, "certFile": self.cert_file, "keyFile": self.key_file}
        return json.dumps(files, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class SchedulerConfigOptions:
    kubeconfig: str = ""
    """Path of the scheduler's kubeconfig; empty means the in-cluster service account."""
    extender_url: str = DEFAULT_EXTENDER_URL
    """URL prefix the scheduler appends ``/filter`` and ``/prioritize`` to."""
    lease_namespace: str = DEFAULT_LEASE_NAMESPACE
    gpu_resources: tuple[str, ...] = (DEFAULT_GPU_RESOURCE,)
    """``managedResources``: only pods asking for one of these are sent to the extender; the
    ``gpuResource`` of every FabricTopology the cluster has belongs here."""
    dra: bool = False
    """GPUs through DRA (a FabricTopology with ``spec.draGpus``): no ``managedResources``, so the
    scheduler sends every pod, claim-only GPU pods included (docs/dra.md)."""
    tls: ExtenderTLS | None = None
    """Mutual TLS with the extender (the chart's ``extender.tls``); None: plain HTTP on loopback."""

    def __post_init__(self) -> None:
        if not self.extender_url.startswith(("http://", "https://")):
            raise ValueError(f"extender URL {self.extender_url!r} must start with http:// or https://")
        if (self.tls is not None) != self.extender_url.startswith("https://"):
            raise ValueError("an https:// extender URL goes with TLS files, an http:// one without")
        if not self.lease_namespace:
            raise ValueError("lease namespace must not be empty")
        object.__setattr__(self, "gpu_resources", gpu_resources(self.gpu_resources))


def template_text() -> str:
    """The template as shipped in the package (the chart copies the same file)."""
    return resources.files("fabricsched.api").joinpath(TEMPLATE_NAME).read_text(encoding="utf-8")


def managed_resources(names: Sequence[str]) -> str:
    """The ``managedResources`` list as one line of JSON (valid YAML), byte for byte what the
    chart's ``toJson`` prints for the same list: keys sorted, no spaces."""
    entries = [{"name": name, "ignoredByScheduler": False} for name in gpu_resources(names)]
    return json.dumps(entries, sort_keys=True, separators=(",", ":"))


def render(options: SchedulerConfigOptions) -> str:
    """The configuration as YAML text; every placeholder must be filled (``substitute`` raises)."""
    values = {
        "kubeconfig": _yaml_string_body(options.kubeconfig),
        "extender_url": _yaml_string_body(options.extender_url.rstrip("/")),
        "lease_namespace": _yaml_string_body(options.lease_namespace),
        "managed_resources": "[]" if options.dra else managed_resources(options.gpu_resources),
        "enable_https": "true" if options.tls is not None else "false",
        "tls_config": options.tls.as_json() if options.tls is not None else "null",
    }
    return string.Template(template_text()).substitute(values)


def write(path: Path, options: SchedulerConfigOptions) -> Path:
    """Render into ``path`` (parents created); returns ``path`` for ``--config``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(options), encoding="utf-8")
    return path


def _yaml_string_body(value: str) -> str:
    # The placeholders sit inside double quotes in the template: escape what would end them.
    return value.replace("\\", "\\\\").replace('"', '\\"')

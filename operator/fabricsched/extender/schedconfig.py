"""The KubeSchedulerConfiguration of the second kube-scheduler (profile ``fabricsched``).

One template (``kube-scheduler-config.yaml.tmpl`` beside this module) serves ``fabricsched
cluster up`` and the Helm chart; only the kubeconfig path, the extender URL and the lease
namespace differ, so they are its only placeholders (``string.Template`` syntax, which the
chart fills with ``replace``).
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

TEMPLATE_NAME = "kube-scheduler-config.yaml.tmpl"
SCHEDULER_NAME = "fabricsched"
LEASE_NAME = "fabricsched-scheduler"
DEFAULT_EXTENDER_URL = "http://127.0.0.1:8888"
DEFAULT_LEASE_NAMESPACE = "kube-system"


@dataclass(frozen=True)
class SchedulerConfigOptions:
    kubeconfig: str = ""
    """Path of the scheduler's kubeconfig; empty means the in-cluster service account."""
    extender_url: str = DEFAULT_EXTENDER_URL
    """URL prefix the scheduler appends ``/filter`` and ``/prioritize`` to."""
    lease_namespace: str = DEFAULT_LEASE_NAMESPACE

    def __post_init__(self) -> None:
        if not self.extender_url.startswith(("http://", "https://")):
            raise ValueError(f"extender URL {self.extender_url!r} must start with http:// or https://")
        if not self.lease_namespace:
            raise ValueError("lease namespace must not be empty")


def template_text() -> str:
    """The template as shipped in the package (the chart copies the same file)."""
    return resources.files("fabricsched.extender").joinpath(TEMPLATE_NAME).read_text(encoding="utf-8")


def render(options: SchedulerConfigOptions) -> str:
    """The configuration as YAML text; every placeholder must be filled (``substitute`` raises)."""
    values = {
        "kubeconfig": _yaml_string_body(options.kubeconfig),
        "extender_url": _yaml_string_body(options.extender_url.rstrip("/")),
        "lease_namespace": _yaml_string_body(options.lease_namespace),
    }
    return string.Template(template_text()).substitute(values)


def render_object(options: SchedulerConfigOptions) -> dict[str, Any]:
    """The rendered configuration parsed back, for checks and tests."""
    loaded = yaml.safe_load(render(options))
    if not isinstance(loaded, dict):
        raise ValueError("the scheduler configuration template does not render to a mapping")
    return loaded


def write(path: Path, options: SchedulerConfigOptions) -> Path:
    """Render into ``path`` (parents created); returns ``path`` for ``--config``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(options), encoding="utf-8")
    return path


def _yaml_string_body(value: str) -> str:
    # The placeholders sit inside double quotes in the template: escape what would end them.
    return value.replace("\\", "\\\\").replace('"', '\\"')

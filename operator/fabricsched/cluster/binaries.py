"""Where the control plane binaries live, at which pinned versions.

``hack/build-tools.sh`` builds them from the Go modules in ``hack/*/go.mod`` into one
folder per tool set and version; the constants here must name the same versions
(a unit test compares them), so a version bump is one edit in go.mod plus one here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from fabricsched.cluster import errors

KUBERNETES_VERSION = "v1.34.4"
ETCD_VERSION = "v3.6.8"
HELM_VERSION = "v3.19.5"

BIN_DIR_ENV = "FABRICSCHED_BIN_DIR"

_SETS: Mapping[str, tuple[str, tuple[str, ...]]] = {
    "kubernetes": (
        KUBERNETES_VERSION, ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
    ),
    "etcd": (ETCD_VERSION, ("etcd",)),
    # helm is built with the pinned Kubernetes minor as its default KubeVersion (build-tools.sh).
    "helm": (f"{HELM_VERSION}-k8s1.{KUBERNETES_VERSION.split('.')[1]}", ("helm",)),
}


@dataclass(frozen=True)
class Binaries:
    """Absolute paths of every tool the local control plane and the tests run."""

    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubectl: Path
    helm: Path | None
    """Optional: only the chart tests need it, so its absence does not block a cluster."""


def bin_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$FABRICSCHED_BIN_DIR``, else ``$HOME/.cache/fabricsched/bin`` (what build-tools.sh uses)."""
    env = os.environ if environ is None else environ
    configured = env.get(BIN_DIR_ENV, "")
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "fabricsched" / "bin"


def set_dir(name: str, root: Path) -> Path:
    """The folder of one tool set, e.g. ``<root>/kubernetes-v1.34.4``."""
    version, _ = _SETS[name]
    return root / f"{name}-{version}"


def find(root: Path | None = None) -> Binaries:
    """Paths of all binaries, or ``MissingBinaries`` listing what is absent."""
    base = bin_dir() if root is None else root
    paths: dict[str, Path] = {}
    missing: list[str] = []
    for name, (_, tools) in _SETS.items():
        for tool in tools:
            path = set_dir(name, base) / tool
            if path.is_file() and os.access(path, os.X_OK):
                paths[tool] = path
            elif name != "helm":
                missing.append(str(path))
    if missing:
        raise errors.MissingBinaries(
            "control plane binaries not found: " + ", ".join(missing)
            + f". Run `make tools` (builds them into {base}; set ${BIN_DIR_ENV} to use another folder)."
        )
    return Binaries(
        etcd=paths["etcd"],
        kube_apiserver=paths["kube-apiserver"],
        kube_controller_manager=paths["kube-controller-manager"],
        kube_scheduler=paths["kube-scheduler"],
        kubectl=paths["kubectl"],
        helm=paths.get("helm"),
    )

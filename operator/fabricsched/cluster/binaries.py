"""Where the control plane binaries live, at which pinned versions.

``hack/build-tools.sh`` builds them from the Go modules in ``hack/*/go.mod`` into one
folder per tool set and version; the constants here must name the same versions
(a unit test compares them), so a version bump is one edit in go.mod plus one here.

``$FABRICSCHED_KUBE_VERSION`` (e.g. ``v1.36.3``) selects another Kubernetes release for both
sides: build-tools.sh builds it into its own folder, and ``find`` looks there (helm follows,
as its default Kubernetes minor is built in). Not pinned, not part of CI: a way to test a minor.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from fabricsched.cluster import errors

KUBERNETES_VERSION = "v1.37.2"
ETCD_VERSION = "v3.7.0"
HELM_VERSION = "v3.19.5"
KWOK_VERSION = "v0.8.0"
JOBSET_VERSION = "v0.12.0"

BIN_DIR_ENV = "FABRICSCHED_BIN_DIR"
KUBE_VERSION_ENV = "FABRICSCHED_KUBE_VERSION"

_RELEASE = re.compile(r"^v?1\.(\d{1,3})\.(\d{1,4})$")
_KUBE_TOOLS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
_OPTIONAL = frozenset({"helm", "jobset"})
"""Only some tests need these, so their absence does not block a cluster."""


@dataclass(frozen=True)
class Binaries:
    """Absolute paths of every tool the local control plane and the tests run."""

    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubectl: Path
    kwok: Path
    """Plays every node's kubelet (heartbeats, pod status)."""
    helm: Path | None
    """Optional: only the chart tests need it."""
    jobset: Path | None = None
    """Optional: the JobSet controller, started only by the tests that ask for it."""
    kube_version: str = KUBERNETES_VERSION
    """The Kubernetes release of the control plane binaries (flags follow it)."""


def _environ(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def kubernetes_version(environ: Mapping[str, str] | None = None) -> str:
    """``$FABRICSCHED_KUBE_VERSION`` as ``vX.Y.Z`` when set, else the pinned release."""
    wanted = _environ(environ).get(KUBE_VERSION_ENV, "").strip()
    if not wanted:
        return KUBERNETES_VERSION
    if not _RELEASE.match(wanted):
        raise errors.MissingBinaries(
            f"${KUBE_VERSION_ENV}={wanted[:40]!r} is not a Kubernetes release like v1.36.3")
    return wanted if wanted.startswith("v") else f"v{wanted}"


def kubernetes_minor(version: str) -> int:
    found = _RELEASE.match(version)
    if found is None:
        raise ValueError(f"not a Kubernetes release: {version[:40]!r}")
    return int(found.group(1))


def _sets(environ: Mapping[str, str] | None) -> dict[str, tuple[str, tuple[str, ...]]]:
    kube = kubernetes_version(environ)
    return {
        "kubernetes": (kube, _KUBE_TOOLS),
        "etcd": (ETCD_VERSION, ("etcd",)),
        "kwok": (KWOK_VERSION, ("kwok",)),
        # helm is built with the Kubernetes minor as its default KubeVersion (build-tools.sh).
        "helm": (f"{HELM_VERSION}-k8s1.{kubernetes_minor(kube)}", ("helm",)),
        "jobset": (JOBSET_VERSION, ("jobset",)),
    }


def bin_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$FABRICSCHED_BIN_DIR``, else ``$HOME/.cache/fabricsched/bin`` (what build-tools.sh uses)."""
    configured = _environ(environ).get(BIN_DIR_ENV, "")
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "fabricsched" / "bin"


def set_dir(name: str, root: Path, environ: Mapping[str, str] | None = None) -> Path:
    """The folder of one tool set, e.g. ``<root>/kubernetes-v1.37.2``."""
    version, _ = _sets(environ)[name]
    return root / f"{name}-{version}"


def find(root: Path | None = None, environ: Mapping[str, str] | None = None) -> Binaries:
    """Paths of all binaries, or ``MissingBinaries`` listing what is absent."""
    base = bin_dir(environ) if root is None else root
    paths: dict[str, Path] = {}
    missing: list[str] = []
    for name, (_, tools) in _sets(environ).items():
        for tool in tools:
            path = set_dir(name, base, environ) / tool
            if path.is_file() and os.access(path, os.X_OK):
                paths[tool] = path
            elif name not in _OPTIONAL:
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
        kwok=paths["kwok"],
        helm=paths.get("helm"),
        jobset=paths.get("jobset"),
        kube_version=kubernetes_version(environ),
    )

"""Helpers of the chart tests (test_chart, test_chart_dashboard, test_chart_monitoring,
test_upgrade, test_telemetry_access): the real helm and kubectl, and finding rendered objects.

The fixtures over them (``tools``, ``helm``, ``kubectl``) are the conftest's.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from clusterkit import find_binaries_or_skip

from fabricsched.cluster import binaries

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "fabricsched"
RELEASE = "chart-test"


@dataclass(frozen=True)
class Helm:
    binary: Path
    home: Path

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "HELM_CACHE_HOME": str(self.home / "cache"),
               "HELM_CONFIG_HOME": str(self.home / "config"), "HELM_DATA_HOME": str(self.home / "data")}
        result = subprocess.run([str(self.binary), *args], capture_output=True, text=True, env=env,
                                timeout=120, check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed:\n{result.stderr}")
        return result

    def template(self, values: Mapping[str, Any], namespace: str, *, check: bool = True,
                 kube_version: str | None = None) -> subprocess.CompletedProcess[str]:
        values_file = self.home / f"values-{uuid.uuid4().hex[:8]}.yaml"
        values_file.write_text(yaml.safe_dump(dict(values)), encoding="utf-8")
        # Explicit, so the render does not depend on the default KubeVersion helm was built with.
        return self.run("template", RELEASE, str(CHART), "--namespace", namespace,
                        "--kube-version", kube_version or binaries.kubernetes_version(),
                        "--values", str(values_file), check=check)

    def render(self, values: Mapping[str, Any], namespace: str, kube_version: str | None = None,
               ) -> list[dict[str, Any]]:
        output = self.template(values, namespace, kube_version=kube_version).stdout
        return [doc for doc in yaml.safe_load_all(output) if doc]


def find_tools_with_helm() -> binaries.Binaries:
    """The built binaries, helm among them; as ``find_binaries_or_skip``, a missing helm skips on a
    developer's machine and fails under CI (no passing by skipping)."""
    found = find_binaries_or_skip("the chart's tests")
    if found.helm is None:
        reason = f"helm {binaries.HELM_VERSION} is not built"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(f"{reason}; run `make tools`")
    return found


@dataclass(frozen=True)
class Kubectl:
    binary: Path
    kubeconfig: Path

    def run(self, *args: str, stdin: str | None = None, check: bool = True,
            ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([str(self.binary), "--kubeconfig", str(self.kubeconfig), *args],
                                input=stdin, capture_output=True, text=True, timeout=120, check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed:\n{result.stderr}")
        return result

    def apply(self, docs: Sequence[Mapping[str, Any]], *extra: str) -> subprocess.CompletedProcess[str]:
        return self.run("apply", "-f", "-", *extra, stdin=yaml.safe_dump_all([dict(d) for d in docs]))


def of_kind(docs: Sequence[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [doc for doc in docs if doc["kind"] == kind]


def one(docs: Sequence[dict[str, Any]], kind: str, name_suffix: str = "") -> dict[str, Any]:
    found = [d for d in of_kind(docs, kind) if d["metadata"]["name"].endswith(name_suffix)]
    assert len(found) == 1, f"expected one {kind} named *{name_suffix}, got {len(found)}"
    return found[0]

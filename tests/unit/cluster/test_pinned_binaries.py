"""The pinned versions and the binary lookup of the local control plane."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fabricsched.cluster import binaries, errors

# (constant, wrapper module, Go module whose version the wrapper pins)
PINS = [
    pytest.param(binaries.KUBERNETES_VERSION, "kube", "k8s.io/kubernetes", id="kubernetes matches hack/kube"),
    pytest.param(binaries.ETCD_VERSION, "etcd", "go.etcd.io/etcd/server/v3", id="etcd matches hack/etcd"),
    pytest.param(binaries.HELM_VERSION, "helm", "helm.sh/helm/v3", id="helm matches hack/helm"),
    pytest.param(binaries.KWOK_VERSION, "kwok", "sigs.k8s.io/kwok", id="kwok matches hack/kwok"),
]


@pytest.mark.parametrize(("constant", "wrapper", "module"), PINS)
def test_version_constant_equals_the_go_mod_pin(repo_root: Path, constant: str, wrapper: str,
                                                module: str) -> None:
    go_mod = (repo_root / "hack" / wrapper / "go.mod").read_text()
    # A require line, in a block or alone: "<module> vX.Y.Z" (possibly "// indirect").
    found = re.findall(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", go_mod, re.MULTILINE)
    assert found, f"{module} is not required in hack/{wrapper}/go.mod"
    assert set(found) == {constant}


def test_bin_dir_honours_the_environment_variable(tmp_path: Path) -> None:
    assert binaries.bin_dir({binaries.BIN_DIR_ENV: str(tmp_path)}) == tmp_path


def test_bin_dir_defaults_to_the_user_cache() -> None:
    assert binaries.bin_dir({}) == Path.home() / ".cache" / "fabricsched" / "bin"


def _install(root: Path, set_name: str, tools: list[str]) -> None:
    folder = binaries.set_dir(set_name, root)
    folder.mkdir(parents=True, exist_ok=True)
    for tool in tools:
        path = folder / tool
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)


KUBE_TOOLS = ["kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"]


def test_missing_binaries_error_names_make_tools_and_each_missing_path(tmp_path: Path) -> None:
    _install(tmp_path, "kubernetes", KUBE_TOOLS[:-1])
    with pytest.raises(errors.MissingBinaries) as raised:
        binaries.find(tmp_path)
    message = str(raised.value)
    assert "make tools" in message
    assert f"kubernetes-{binaries.KUBERNETES_VERSION}/kubectl" in message
    assert f"etcd-{binaries.ETCD_VERSION}/etcd" in message
    assert "/kube-apiserver" not in message  # present, so not listed


def test_a_complete_set_resolves_and_helm_is_optional(tmp_path: Path) -> None:
    _install(tmp_path, "kubernetes", KUBE_TOOLS)
    _install(tmp_path, "etcd", ["etcd"])
    _install(tmp_path, "kwok", ["kwok"])
    found = binaries.find(tmp_path)
    assert found.kubectl == tmp_path / f"kubernetes-{binaries.KUBERNETES_VERSION}" / "kubectl"
    assert found.etcd == tmp_path / f"etcd-{binaries.ETCD_VERSION}" / "etcd"
    assert found.helm is None
    _install(tmp_path, "helm", ["helm"])
    assert binaries.find(tmp_path).helm == binaries.set_dir("helm", tmp_path) / "helm"
    assert binaries.set_dir("helm", tmp_path).name.startswith(f"helm-{binaries.HELM_VERSION}")


def test_a_file_that_is_not_executable_counts_as_missing(tmp_path: Path) -> None:
    _install(tmp_path, "kubernetes", KUBE_TOOLS)
    _install(tmp_path, "etcd", ["etcd"])
    _install(tmp_path, "kwok", ["kwok"])
    (binaries.set_dir("etcd", tmp_path) / "etcd").chmod(0o644)
    with pytest.raises(errors.MissingBinaries, match="etcd"):
        binaries.find(tmp_path)


def test_another_kubernetes_release_is_looked_up_in_its_own_folder_with_its_helm(tmp_path: Path) -> None:
    environ = {binaries.KUBE_VERSION_ENV: "1.36.3"}
    assert binaries.kubernetes_version(environ) == "v1.36.3"
    assert binaries.kubernetes_version({}) == binaries.KUBERNETES_VERSION
    assert binaries.set_dir("kubernetes", tmp_path, environ).name == "kubernetes-v1.36.3"
    assert binaries.set_dir("helm", tmp_path, environ).name == f"helm-{binaries.HELM_VERSION}-k8s1.36"
    _install(tmp_path, "kubernetes", KUBE_TOOLS)  # the pinned release only
    with pytest.raises(errors.MissingBinaries, match=r"kubernetes-v1\.36\.3/kube-apiserver"):
        binaries.find(tmp_path, environ)


@pytest.mark.parametrize("wanted", ["latest", "v1.36", "1.36.3; rm -rf /", "v2.0.0"])
def test_a_kube_version_that_is_not_a_release_is_refused(wanted: str) -> None:
    with pytest.raises(errors.MissingBinaries, match="not a Kubernetes release"):
        binaries.kubernetes_version({binaries.KUBE_VERSION_ENV: wanted})


def test_build_tools_and_the_python_side_agree_on_the_variable(repo_root: Path) -> None:
    script = (repo_root / "hack" / "build-tools.sh").read_text()
    assert binaries.KUBE_VERSION_ENV in script and "kube-wrapper.sh" in script

"""The deployment files agree with the package and with each other.

Copies that must not drift (the chart's CRDs and scheduler-config template), versions that must
move together (chart, image, package, kube-scheduler), the Dockerfile's hardening, and the kind
cluster's labels against the FabricTopology and the chart preset that read them. Pure file
checks: the chart's rendering is checked with the real helm in tests/integration/test_chart.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

import fabricsched
from fabricsched.api import schedconfig
from fabricsched.api import topology as api
from fabricsched.cluster import binaries
from fabricsched.extender import service
from fabricsched.extender.decide import locality
from fabricsched.placement import patience, request

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "fabricsched"
SYNC_HINT = "copy it again: cp {src} {dst}"


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _yaml_docs(path: Path) -> list[Any]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc is not None]


# --- copies that must stay byte-equal -------------------------------------------------------


def test_chart_ships_exactly_the_generated_crds() -> None:
    top = sorted(p.name for p in (REPO / "crds").glob("*.yaml"))
    in_chart = sorted(p.name for p in (CHART / "crds").glob("*.yaml"))
    assert top, "crds/ holds no CRD"
    assert in_chart == top, "charts/fabricsched/crds/ must hold the same files as crds/: cp crds/*.yaml " \
        "charts/fabricsched/crds/"


@pytest.mark.parametrize("name", sorted(p.name for p in (REPO / "crds").glob("*.yaml")))
def test_chart_crd_is_a_byte_copy_of_the_generated_one(name: str) -> None:
    src, dst = REPO / "crds" / name, CHART / "crds" / name
    assert dst.is_file(), SYNC_HINT.format(src="crds/" + name, dst="charts/fabricsched/crds/")
    assert dst.read_bytes() == src.read_bytes(), SYNC_HINT.format(
        src="crds/" + name, dst="charts/fabricsched/crds/"
    )


def test_chart_scheduler_template_is_a_byte_copy_of_the_package_one() -> None:
    chart_copy = CHART / "files" / schedconfig.TEMPLATE_NAME
    assert chart_copy.read_text(encoding="utf-8") == schedconfig.template_text(), SYNC_HINT.format(
        src="operator/fabricsched/api/" + schedconfig.TEMPLATE_NAME, dst="charts/fabricsched/files/"
    )


def test_chart_fills_every_placeholder_of_the_scheduler_template() -> None:
    # The chart fills placeholders with `replace`; one it does not know would reach the
    # scheduler as the literal text "${...}".
    placeholders = set(re.findall(r"\$\{(\w+)\}", schedconfig.template_text()))
    helpers = (CHART / "templates" / "_helpers.tpl").read_text(encoding="utf-8")
    replaced = set(re.findall(r'replace "\$\{(\w+)\}"', helpers))
    assert placeholders, "the template has no ${...} placeholder: the chart's replace calls are stale"
    assert replaced == placeholders


# --- versions that move together ------------------------------------------------------------


def test_chart_and_image_versions_follow_the_package() -> None:
    chart = _yaml(CHART / "Chart.yaml")
    assert chart["apiVersion"] == "v2"
    assert chart["version"] == fabricsched.__version__
    assert chart["appVersion"] == fabricsched.__version__


def test_chart_runs_the_clusters_own_kube_scheduler_and_names_the_tested_release() -> None:
    # The tag defaults to the cluster's version (the chart's helper; tests/integration/test_chart.py
    # renders it); the annotation records the release the tests run.
    values = _yaml(CHART / "values.yaml")
    chart = _yaml(CHART / "Chart.yaml")
    assert values["scheduler"]["image"]["repository"] == "registry.k8s.io/kube-scheduler"
    assert values["scheduler"]["image"]["tag"] == ""
    assert chart["annotations"]["fabricsched.io/kube-scheduler-version"] == binaries.KUBERNETES_VERSION


def test_chart_locality_wait_is_the_products_one_default() -> None:
    # One constant: the chart, `fabricsched run` and the simulator wait alike by default.
    values = _yaml(CHART / "values.yaml")["fabricsched"]
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    shipped = patience.DEFAULT_LOCALITY_WAIT
    assert values["localityWait"] == locality.duration_text(shipped.timeout_s)
    assert values["localityTolerance"] == shipped.tolerance
    assert values["localityHoldLimit"] == shipped.hold_limit
    properties = schema["properties"]["fabricsched"]["properties"]
    assert properties["localityWait"]["default"] == values["localityWait"]
    assert properties["localityHoldLimit"]["default"] == values["localityHoldLimit"]


def test_chart_restart_placement_is_the_products_default() -> None:
    values = _yaml(CHART / "values.yaml")["fabricsched"]
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    shipped = service.ServiceOptions().restart_placement
    assert values["restartPlacement"] == shipped
    declared = schema["properties"]["fabricsched"]["properties"]["restartPlacement"]
    assert declared["default"] == shipped
    assert declared["enum"] == list(service.RESTART_PLACEMENTS)


def test_chart_fit_order_is_the_products_default() -> None:
    values = _yaml(CHART / "values.yaml")["fabricsched"]
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    shipped = service.ServiceOptions().fit_order.value
    assert values["fitOrder"] == shipped
    declared = schema["properties"]["fabricsched"]["properties"]["fitOrder"]
    assert declared["default"] == shipped
    assert declared["enum"] == [o.value for o in request.FitOrder]


# --- the image ------------------------------------------------------------------------------


def _dockerfile() -> list[str]:
    text = (REPO / "Dockerfile").read_text(encoding="utf-8")
    # Join continuation lines, drop comments: one instruction per entry.
    joined = re.sub(r"\\\n", " ", text)
    lines = (line.strip() for line in joined.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def _base_image() -> str:
    args = {m.group(1): m.group(2) for line in _dockerfile() if (m := re.match(r"ARG (\w+)=(\S+)", line))}
    return args["PYTHON_IMAGE"]


def test_dockerfile_base_is_a_pinned_slim_python() -> None:
    image = _base_image()
    name, _, tag = image.partition("@")[0].partition(":")
    assert name == "python"
    # A full version (3.11.11), never `latest` or a moving minor tag (3.11-slim).
    assert re.fullmatch(r"3\.\d+\.\d+-slim(-\w+)?", tag), f"base {image} is not pinned to a patch release"
    minor = tuple(int(part) for part in tag.split("-")[0].split(".")[:2])
    assert minor >= (3, 11), "pyproject.toml requires Python >= 3.11"


def test_dockerfile_every_stage_uses_the_pinned_base() -> None:
    froms = [line for line in _dockerfile() if line.startswith("FROM ")]
    assert len(froms) >= 2, "expected a multi-stage build"
    for line in froms:
        assert line.split()[1] == "${PYTHON_IMAGE}", line


def test_dockerfile_runs_as_the_charts_non_root_user() -> None:
    lines = _dockerfile()
    final_stage = lines[max(i for i, line in enumerate(lines) if line.startswith("FROM ")):]
    users = [line.split()[1] for line in final_stage if line.startswith("USER ")]
    assert users, "the runtime stage sets no USER"
    uid, _, gid = users[-1].partition(":")
    # Numeric: the kubelet can only enforce runAsNonRoot on a numeric user.
    assert uid.isdigit() and int(uid) != 0
    assert gid.isdigit() and int(gid) != 0
    security = _yaml(CHART / "values.yaml")["podSecurityContext"]
    assert (security["runAsUser"], security["runAsGroup"]) == (int(uid), int(gid))
    assert 'ENTRYPOINT ["fabricsched"]' in final_stage


def test_dockerignore_lets_in_what_the_dockerfile_copies() -> None:
    allowed = {
        line[1:].rstrip("/")
        for line in (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.startswith("!")
    }
    copied: set[str] = set()
    for line in _dockerfile():
        if line.startswith("COPY ") and "--from=" not in line:
            copied.update(part.rstrip("/") for part in line.split()[1:-1])
    assert copied, "the Dockerfile copies nothing from the build context"
    assert copied <= allowed, f".dockerignore keeps out {sorted(copied - allowed)}"


# --- kind: the cluster, its topology and the chart preset agree ------------------------------


def _kind_workers() -> list[dict[str, str]]:
    config = _yaml(REPO / "kind-config.yaml")
    assert config["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    roles = [node["role"] for node in config["nodes"]]
    assert roles.count("control-plane") == 1
    return [node.get("labels", {}) for node in config["nodes"] if node["role"] == "worker"]


def _kind_topology() -> api.FabricTopologySpec:
    manifest = _yaml(REPO / "examples" / "kind-topology.yaml")
    assert manifest["apiVersion"] == api.API_VERSION and manifest["kind"] == api.KIND
    return api.FabricTopologySpec.model_validate(manifest["spec"])


def test_kind_workers_form_two_spines_of_two_leaves() -> None:
    spec = _kind_topology()
    leaf_label, spine_label = (tier.node_label for tier in spec.tiers)
    workers = _kind_workers()
    assert len(workers) >= 4
    parents: dict[str, set[str]] = {}
    for labels in workers:
        parents.setdefault(labels[leaf_label], set()).add(labels[spine_label])
    assert all(len(spines) == 1 for spines in parents.values()), f"a leaf under two spines: {parents}"
    spines: dict[str, int] = {}
    for (spine,) in parents.values():
        spines[spine] = spines.get(spine, 0) + 1
    assert len(spines) == 2 and set(spines.values()) == {2}, spines


def test_kind_topology_selects_every_worker() -> None:
    spec = _kind_topology()
    assert not spec.node_selector.match_expressions
    for labels in _kind_workers():
        assert spec.node_selector.match_labels.items() <= labels.items(), labels
        assert all(tier.node_label in labels for tier in spec.tiers), labels


def test_chart_topograph_preset_reads_the_kind_labels() -> None:
    preset = _yaml(CHART / "values.yaml")["topology"]["presets"]["topograph"]
    spec = _kind_topology()
    assert [tier["nodeLabel"] for tier in preset["tiers"]] == [tier.node_label for tier in spec.tiers]
    assert preset["nodeSelector"]["matchLabels"] == spec.node_selector.match_labels


@pytest.mark.parametrize("preset", ["topograph", "nvidia", "aws", "gke", "nvlink", "topograph-nvlink"])
def test_chart_preset_is_a_valid_topology_spec(preset: str) -> None:
    values = _yaml(CHART / "values.yaml")["topology"]["presets"][preset]
    spec = api.FabricTopologySpec.model_validate(
        {"nodeSelector": values["nodeSelector"], "tiers": values["tiers"]}
    )
    labels = [tier.node_label for tier in spec.tiers]
    assert len(set(labels)) == len(labels), "two tiers read the same label"

"""``fabricsched explain`` against a real control plane, the real fabricsched scheduler and
``fabricsched run``: a placed gang explained in text and JSON, and every failure's exit code,
through the installed console scripts (and ``kubectl fabricsched``, the plugin).

A cluster of its own (``harness.fabric_cluster``): 8 hosts of 8 GPUs in 2 leaves under one
spine; a 6-pod Job spans both.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from clusterkit import new_namespace
from harness import PLACEMENTS, REPO, fabric_cluster, trainer_spec
from waiting import wait_for

from fabricsched.cluster import controlplane, processes, rest

SCRIPTS = Path(sys.executable).parent
TOPOLOGY = "ib-explain"


@dataclass
class Stage:
    plane: controlplane.ControlPlane
    api: rest.Client
    leaf_of: dict[str, str]
    namespace: str
    placed: list[str]
    """Nodes of the 6-pod Job ``wide`` by rank."""


def explain(
    *args: str,
    kubeconfig: Path | None = None,
    tool: str = "fabricsched",
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    argv = [str(SCRIPTS / tool), "explain", *args]
    if kubeconfig is not None:
        argv.append(f"--kubeconfig={kubeconfig}")
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env or dict(os.environ))


def _bound_nodes(api: rest.Client, namespace: str, size: int) -> list[str] | None:
    pods = api.call("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]
    by_rank = {int(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]): p for p in pods}
    if len(by_rank) < size or not all(p["spec"].get("nodeName") for p in by_rank.values()):
        return None
    return [by_rank[r]["spec"]["nodeName"] for r in range(size)]


@pytest.fixture(scope="module")
def stage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stage]:
    with fabric_cluster(tmp_path_factory.mktemp("explain-cluster"), shape=(1, 2, 4), topology=TOPOLOGY,
                        recover_after_s=None) as fabric:
        plane, api, leaf_of = fabric.plane, fabric.api, fabric.leaf_of
        namespace = new_namespace(api, "e")
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "wide"},
            "spec": {
                "parallelism": 6,
                "completions": 6,
                "completionMode": "Indexed",
                "backoffLimit": 0,
                "template": {"spec": trainer_spec(8)},
            },
        }
        api.call("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", job)
        placed = wait_for("6 pods bound", lambda: _bound_nodes(api, namespace, 6), timeout=60)
        wait_for(
            "FabricPlacement wide Bound",
            lambda: (
                (p := api.request("GET", PLACEMENTS.format(ns=namespace) + "/wide"))[0] == 200
                and p[1].get("status", {}).get("phase") == "Bound"
            ),
        )
        yield Stage(plane, api, leaf_of, namespace, placed)


def _token_kubeconfig(stage: Stage, path: Path, account: str) -> Path:
    """A kubeconfig for ServiceAccount ``account`` of the stage's namespace (a bound token)."""
    ns = stage.namespace
    stage.api.call("POST", f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": account}})
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600},
    }
    token = stage.api.call("POST", f"/api/v1/namespaces/{ns}/serviceaccounts/{account}/token", request)
    admin = yaml.safe_load(stage.plane.kubeconfig.read_text())
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": admin["clusters"],
        "users": [{"name": account, "user": {"token": token["status"]["token"]}}],
        "contexts": [
            {"name": account, "context": {"cluster": admin["clusters"][0]["name"], "user": account}}
        ],
        "current-context": account,
    }
    path.write_text(yaml.safe_dump(config))
    return path


def test_a_placed_gang_is_explained_in_text_with_its_hosts_and_leaves(stage: Stage) -> None:
    done = explain(f"{stage.namespace}/wide", kubeconfig=stage.plane.kubeconfig)
    assert done.returncode == 0, done.stderr
    assert f"{stage.namespace}/wide: Job wide -> FabricPlacement wide" in done.stdout
    assert "phase Bound (6/6 ranks bound)" in done.stdout
    for rank, node in enumerate(stage.placed):
        assert re.search(
            rf"^\s+{rank}\s+{node}\s+{stage.leaf_of[node]}\s+s1\s+yes$", done.stdout, re.M
        ), done.stdout
    assert "path: healthy" in done.stdout
    assert ", traffic all-to-all" in done.stdout  # no annotation, no FabricTopology default


def test_a_ring_gangs_placement_and_explanation_show_its_traffic_pattern(stage: Stage) -> None:
    # The two hosts `wide` left free; fabricsched.io/traffic on the pods names the pattern.
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "ring"},
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "template": {"metadata": {"annotations": {"fabricsched.io/traffic": "ring"}},
                         "spec": trainer_spec(8)},
        },
    }
    jobs = f"/apis/batch/v1/namespaces/{stage.namespace}/jobs"
    stage.api.call("POST", jobs, job)
    try:
        placement = wait_for(
            "FabricPlacement ring Bound",
            lambda: (p := stage.api.request("GET", PLACEMENTS.format(ns=stage.namespace) + "/ring"))[0] == 200
            and p[1].get("status", {}).get("phase") == "Bound" and p[1],
            timeout=60,
        )
        assert placement["spec"]["traffic"] == "ring"
        assert placement["status"]["commSlowdown"] == 1.0
        done = explain(f"{stage.namespace}/ring", kubeconfig=stage.plane.kubeconfig)
        assert done.returncode == 0, done.stderr
        assert ", traffic ring" in done.stdout, done.stdout
        wire = json.loads(explain(f"{stage.namespace}/ring", "-o", "json",
                                  kubeconfig=stage.plane.kubeconfig).stdout)
        assert wire["gangs"][0]["traffic"] == "ring"
    finally:
        stage.api.request("DELETE", f"{jobs}/ring", {"propagationPolicy": "Background"})


def test_a_name_alone_is_looked_up_in_the_kubeconfig_contexts_namespace(stage: Stage, tmp_path: Path) -> None:
    config = yaml.safe_load(stage.plane.kubeconfig.read_text())
    current = config["current-context"]
    for entry in config["contexts"]:
        if entry["name"] == current:
            entry["context"]["namespace"] = stage.namespace
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    done = explain("wide", kubeconfig=path)
    assert done.returncode == 0, done.stderr
    assert f"{stage.namespace}/wide: Job wide -> FabricPlacement wide" in done.stdout
    # Without a namespace in the context: default, where no `wide` exists.
    missing = explain("wide", kubeconfig=stage.plane.kubeconfig)
    assert missing.returncode == 1 and "in namespace default" in missing.stderr


def test_json_names_every_rank_and_a_degraded_host_on_the_path(stage: Stage) -> None:
    host = stage.placed[0]
    patch = {"metadata": {"labels": {"fabricsched.io/fabric-health": "degraded"}}}
    stage.api.call("PATCH", f"/api/v1/nodes/{host}", patch, rest.MERGE_PATCH)
    topology_path = f"/apis/fabricsched.io/v1alpha1/fabrictopologies/{TOPOLOGY}"
    wait_for(
        "the host listed degraded",
        lambda: any(
            d.get("node") == host
            for d in stage.api.call("GET", topology_path).get("status", {}).get("degraded", [])
        ),
    )
    env = {
        **os.environ,
        "KUBECONFIG": str(stage.plane.kubeconfig),
        "PATH": f"{SCRIPTS}:{os.environ['PATH']}",
    }
    argv = [
        str(stage.plane.binaries.kubectl),
        "fabricsched",
        "explain",
        f"{stage.namespace}/wide",
        "-o",
        "json",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    wire = json.loads(done.stdout)
    gang = wire["gangs"][0]
    assert wire["workload"]["kind"] == "Job" and gang["phase"] == "Bound" and gang["size"] == 6
    assert [r["node"] for r in gang["ranks"]] == stage.placed
    assert [r["domains"]["leaf"] for r in gang["ranks"]] == [stage.leaf_of[n] for n in stage.placed]
    path = gang["unhealthyPath"]
    assert path["source"] in ("status", "topology") and path["count"] >= 1
    element = next(e for e in path["elements"] if e["name"] == host)
    assert (
        element["state"] == "degraded"
        and element["since"]
        and element["sources"][0]["source"] == "label"
    )
    assert any(
        e["reason"] == "Scheduled" and e["object"].startswith("Pod/wide-") for e in wire["events"]
    )
    assert len(wire["events"]) <= 10
    stage.api.call(
        "PATCH",
        f"/api/v1/nodes/{host}",
        {"metadata": {"labels": {"fabricsched.io/fabric-health": None}}},
        rest.MERGE_PATCH,
    )


def test_a_job_that_cannot_be_placed_explains_why_it_waits(stage: Stage) -> None:
    annotations = {"fabricsched.io/required-tier": "leaf"}
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "huge"},
        "spec": {
            "parallelism": 5,
            "completions": 5,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "template": {"metadata": {"annotations": annotations}, "spec": trainer_spec(8)},
        },
    }
    stage.api.call("POST", f"/apis/batch/v1/namespaces/{stage.namespace}/jobs", job)

    def waiting() -> dict[str, Any] | None:
        done = explain(f"{stage.namespace}/huge", "-o", "yaml", kubeconfig=stage.plane.kubeconfig)
        assert done.returncode == 0, done.stderr
        wire: dict[str, Any] = yaml.safe_load(done.stdout)
        last.append(done.stdout)
        # The scheduler's FailedScheduling (or fabricsched's own Event) names the tier and the numbers.
        said = any("leaf" in e["message"] and "5 pods" in e["message"] for e in wire["events"])
        return wire if said else None

    last: list[str] = []
    try:
        wait_for("explain shows why huge waits", waiting, timeout=60)
    except BaseException:
        print(last[-1] if last else "no output")
        raise

    wire = wait_for("explain shows why huge waits", waiting, timeout=60)
    assert wire["workload"]["name"] == "huge"
    if wire["gangs"]:  # operators that keep a Pending FabricPlacement
        assert wire["gangs"][0]["phase"] == "Pending" and wire["gangs"][0]["why"]
    else:
        assert "no FabricPlacement" in wire["notes"][-1]


def test_the_documented_read_only_rbac_is_enough(stage: Stage, tmp_path: Path) -> None:
    account = f"reader-{uuid.uuid4().hex[:6]}"
    kubeconfig = _token_kubeconfig(stage, tmp_path / "reader.kubeconfig", account)
    doc = (REPO / "docs" / "troubleshooting.md").read_text()
    roles = list(yaml.safe_load_all(re.search(r"```yaml\n(.*?)```", doc, re.S).group(1)))  # type: ignore[union-attr]
    subject = [{"kind": "ServiceAccount", "name": account, "namespace": stage.namespace}]
    for role in roles:
        role["metadata"]["name"] += f"-{account}"
        stage.api.call("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", role)
    ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole"}
    stage.api.call(
        "POST",
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{stage.namespace}/rolebindings",
        {
            "metadata": {"name": account},
            "subjects": subject,
            "roleRef": {**ref, "name": roles[0]["metadata"]["name"]},
        },
    )
    stage.api.call(
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "metadata": {"name": account},
            "subjects": subject,
            "roleRef": {**ref, "name": roles[1]["metadata"]["name"]},
        },
    )

    def explained() -> subprocess.CompletedProcess[str] | None:
        done = explain(f"{stage.namespace}/wide", "-o", "json", kubeconfig=kubeconfig)
        return done if done.returncode == 0 else None

    done = wait_for("explain with the documented RBAC", explained, timeout=30)
    wire = json.loads(done.stdout)
    assert wire["notes"] == [] and [r["node"] for r in wire["gangs"][0]["ranks"]] == stage.placed


def test_a_name_that_does_not_exist_exits_1_with_one_line(stage: Stage) -> None:
    done = explain(f"{stage.namespace}/nothing-here", kubeconfig=stage.plane.kubeconfig)
    assert done.returncode == 1 and done.stdout == ""
    assert (
        done.stderr.count("\n") == 1 and "nothing-here" in done.stderr and "Traceback" not in done.stderr
    )


def test_a_user_who_cannot_read_the_namespace_exits_3(stage: Stage, tmp_path: Path) -> None:
    kubeconfig = _token_kubeconfig(
        stage, tmp_path / "nobody.kubeconfig", f"nobody-{uuid.uuid4().hex[:6]}"
    )
    done = explain(f"{stage.namespace}/wide", kubeconfig=kubeconfig)
    assert done.returncode == 3, done.stderr
    assert done.stderr.count("\n") == 1 and "forbidden" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "content",
    [
        "{not yaml: [",
        "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\n",
        "certificate-authority-data",
    ],
    ids=["not YAML", "no context", "not a kubeconfig"],
)
def test_a_broken_kubeconfig_exits_3(tmp_path: Path, content: str) -> None:
    (tmp_path / "kubeconfig").write_text(content)
    done = explain("ns/wide", kubeconfig=tmp_path / "kubeconfig")
    assert done.returncode == 3 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_an_api_server_that_refuses_connections_exits_3(stage: Stage, tmp_path: Path) -> None:
    config = yaml.safe_load(stage.plane.kubeconfig.read_text())
    (port,) = processes.free_ports(1)
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(config))
    done = explain(f"{stage.namespace}/wide", kubeconfig=tmp_path / "kubeconfig")
    assert done.returncode == 3 and done.stderr.count("\n") == 1, done.stderr
    assert "cannot reach the API server" in done.stderr and "refused" in done.stderr.lower()


def test_a_token_the_api_server_rejects_exits_3(stage: Stage, tmp_path: Path) -> None:
    config = yaml.safe_load(stage.plane.kubeconfig.read_text())
    fake = base64.urlsafe_b64encode(os.urandom(24)).decode()
    config["users"][0]["user"] = {"token": fake}
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(config))
    done = explain(f"{stage.namespace}/wide", kubeconfig=tmp_path / "kubeconfig")
    assert done.returncode == 3 and "unauthorized" in done.stderr and done.stderr.count("\n") == 1


@pytest.mark.parametrize(
    "args",
    [[], ["a/b/c"], ["ns/x", "-o", "xml"], ["ns/x", "-n", "other"]],
    ids=["no name", "two slashes", "unknown format", "two namespaces"],
)
def test_bad_usage_exits_2(args: list[str]) -> None:
    done = explain(*args, tool="kubectl-fabricsched")
    assert done.returncode == 2 and "Traceback" not in done.stderr


def test_version() -> None:
    done = subprocess.run(
        [str(SCRIPTS / "fabricsched"), "--version"], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0 and done.stdout.strip() == "fabricsched 0.1.0"

"""Mutual TLS between the kube-scheduler and the extender (the chart's ``extender.tls``).

The chart renders the Secret (a CA, the extender's certificate for 127.0.0.1, the scheduler's
client certificate), the scheduler configuration with ``enableHTTPS`` and ``tlsConfig``, and the
``--extender-tls-*`` arguments; one pair (``pairs``) runs them for real on the local control
plane, the Secret's files laid out as the pod's projections mount them. A 2-pod gang must bind
through the HTTPS extender; a client without a certificate, or with one of another CA, is refused.
"""

from __future__ import annotations

import base64
import datetime
import json
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from clusterkit import find_binaries_or_skip, new_namespace
from pairs import Pair, containers, helm_binary, one, render_chart, scheduler_config
from waiting import wait_for

from fabricsched.cluster import certs, controlplane, kwok, nodes, rest, samples

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "fabricsched-tls"
CHART_DIR = "/etc/fabricsched-tls"


@pytest.fixture(scope="module")
def tls_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Pair, rest.Client, Path]]:
    bins = find_binaries_or_skip()
    helm = helm_binary(bins)
    root = tmp_path_factory.mktemp("tls")
    values = {"extender": {"tls": {"enabled": True}}, "replicas": 1}
    docs = render_chart(helm, root / "helm", NAMESPACE, values)
    config = scheduler_config(docs)
    (extender,) = config["extenders"]
    assert extender["enableHTTPS"] is True and extender["urlPrefix"].startswith("https://")
    secret = {k: base64.b64decode(v) for k, v in one(docs, "Secret")["data"].items()}
    # The two projections of deployment.yaml: each container sees ca.crt, tls.crt, tls.key.
    mounts = {"scheduler": {"ca.crt": "ca.crt", "tls.crt": "client.crt", "tls.key": "client.key"},
              "fabricsched": {"ca.crt": "ca.crt", "tls.crt": "tls.crt", "tls.key": "tls.key"}}
    for container, items in mounts.items():
        (root / container).mkdir()
        for path, key in items.items():
            (root / container / path).write_bytes(secret[key])
    # One pair: the configuration names the scheduler's files, the arguments the extender's.
    args = [a.replace(CHART_DIR, str(root / "fabricsched")) for a in containers(docs)["fabricsched"]["args"]]
    config = json.loads(json.dumps(config).replace(CHART_DIR, str(root / "scheduler")))
    plane = controlplane.up(root / "cluster")
    api = plane.client()
    pair = Pair("tls-pair", bins, plane.kubeconfig, root / "pair", config, args)
    try:
        subprocess.run([str(plane.binaries.kubectl), f"--kubeconfig={plane.kubeconfig}", "apply",
                        "--server-side", "-f", str(REPO / "crds")],
                       check=True, capture_output=True, timeout=60)
        wait_for("CRD fabricplacements",
                 lambda: api.request("GET", "/apis/fabricsched.io/v1alpha1/fabricplacements")[0] == 200)
        api.call("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
        nodes.create(api, samples.sample_fabric(spines=1, leaves_per_spine=2, hosts_per_leaf=2, gpus=8),
                     datetime.datetime.now(datetime.UTC))
        topology = samples.demo_topology("ib-tls")
        topology["spec"]["links"] = []
        api.call("POST", "/apis/fabricsched.io/v1alpha1/fabrictopologies", topology)
        pair.start()
        pair.wait_ready()
        yield pair, api, root
    finally:
        pair.stop()
        api.close()
        plane.down()


def _get(url: str, context: ssl.SSLContext) -> int:
    with urllib.request.urlopen(url, context=context, timeout=5) as response:
        return int(response.status)


def test_a_gang_binds_through_the_https_extender(tls_pair: tuple[Pair, rest.Client, Path]) -> None:
    _, api, _ = tls_pair
    ns = new_namespace(api, "tls")
    gpus = {"nvidia.com/gpu": "8"}
    pod = {"schedulerName": "fabricsched", "restartPolicy": "Never",
           "containers": [{"name": "t", "image": "trainer:1",
                           "resources": {"requests": gpus, "limits": gpus}}]}
    body: dict[str, Any] = {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "pair"},
        "spec": {"parallelism": 2, "completions": 2, "completionMode": "Indexed", "backoffLimit": 0,
                 "template": {"spec": pod}}}
    api.call("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", body)

    def bound() -> list[str] | None:
        pods = api.call("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
        placed = [p["spec"].get("nodeName") for p in pods]
        return placed if len(placed) == 2 and all(placed) else None

    placed = wait_for("the 2-pod gang bound", bound, timeout=60)
    assert len(set(placed)) == 2
    # The extender decided (its plan exists): the scheduler reached it over mutual TLS.
    status, plan = api.request("GET", f"/apis/fabricsched.io/v1alpha1/namespaces/{ns}/fabricplacements/pair")
    assert status == 200 and sorted(r["node"] for r in plan["spec"]["ranks"]) == sorted(placed)
    for pod in api.call("GET", f"/api/v1/namespaces/{ns}/pods")["items"]:
        kwok.delete_now(api, ns, pod["metadata"]["name"])


def test_a_client_with_the_charts_certificate_is_answered(tls_pair: tuple[Pair, rest.Client, Path]) -> None:
    pair, _, root = tls_pair
    context = ssl.create_default_context(cafile=str(root / "scheduler" / "ca.crt"))
    context.load_cert_chain(str(root / "scheduler" / "tls.crt"), str(root / "scheduler" / "tls.key"))
    assert _get(f"https://127.0.0.1:{pair.extender_port}/openapi.json", context) == 200


def test_a_client_without_a_certificate_is_refused(tls_pair: tuple[Pair, rest.Client, Path]) -> None:
    pair, _, root = tls_pair
    context = ssl.create_default_context(cafile=str(root / "scheduler" / "ca.crt"))
    with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
        _get(f"https://127.0.0.1:{pair.extender_port}/openapi.json", context)


def test_a_client_with_another_cas_certificate_is_refused(tls_pair: tuple[Pair, rest.Client, Path]) -> None:
    pair, _, root = tls_pair
    other = certs.generate(root / "other-pki", datetime.datetime.now(datetime.UTC))
    context = ssl.create_default_context(cafile=str(root / "scheduler" / "ca.crt"))
    context.load_cert_chain(str(other.admin.cert), str(other.admin.key))
    with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
        _get(f"https://127.0.0.1:{pair.extender_port}/openapi.json", context)


def test_plain_http_gets_no_answer(tls_pair: tuple[Pair, rest.Client, Path]) -> None:
    pair, _, _ = tls_pair
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(f"http://127.0.0.1:{pair.extender_port}/openapi.json", timeout=5)

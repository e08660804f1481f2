#!/usr/bin/env bash
# The kind end-to-end run (`make kind-e2e`): a kind cluster shaped like a small fabric, the image
# built and loaded, the chart installed, the kind FabricTopology applied, then tests/e2e.
#
# Needs docker (with a running engine), kind, kubectl and helm on PATH, or in $KIND, $KUBECTL,
# $HELM; helm and kubectl fall back to the ones `make tools` builds.
#   KIND_CLUSTER_NAME  cluster name (default: fabricsched)
#   KIND_NODE_IMAGE    kindest/node image (default: kindest/node at the pinned Kubernetes release,
#                      hack/kube/go.mod, so kind runs what the local control plane runs)
#   KIND_KEEP=1        keep the cluster afterwards (default: delete it; a cluster that existed
#                      before the run is always kept)
#   IMAGE              image to build and load (default: fabricsched:e2e)
#   PYTHON             interpreter with the test dependencies (default: .venv/bin/python)
#   PYTEST_ARGS        extra pytest arguments
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"

CLUSTER="${KIND_CLUSTER_NAME:-fabricsched}"
IMAGE="${IMAGE:-fabricsched:e2e}"
NAMESPACE="${NAMESPACE:-fabricsched-system}"
PYTHON="${PYTHON:-$REPO/.venv/bin/python}"
BIN_DIR="${FABRICSCHED_BIN_DIR:-$HOME/.cache/fabricsched/bin}"
KIND="${KIND:-kind}"
KUBE_PIN="$(sed -n 's/^[[:space:]]*\(require \)\{0,1\}k8s\.io\/kubernetes \(v[0-9.]*\).*$/\2/p' hack/kube/go.mod)"
KIND_NODE_IMAGE="${KIND_NODE_IMAGE:-kindest/node:${KUBE_PIN:?no k8s.io/kubernetes pin in hack/kube/go.mod}}"
export KUBECONFIG="${KIND_KUBECONFIG:-$REPO/out/kind-$CLUSTER.kubeconfig}"

pick() { # <name> <fallback path>: the tool on PATH, else the one make tools built
  if command -v "$1" >/dev/null 2>&1; then command -v "$1"; else echo "$2"; fi
}
KUBECTL="${KUBECTL:-$(pick kubectl "$(ls -d "$BIN_DIR"/kubernetes-*/kubectl 2>/dev/null | tail -1)")}"
HELM="${HELM:-$(pick helm "$(ls -d "$BIN_DIR"/helm-*/helm 2>/dev/null | tail -1)")}"
export KUBECTL
for tool in docker "$KIND" "$KUBECTL" "$HELM" "$PYTHON"; do
  command -v "$tool" >/dev/null 2>&1 || { echo "kind-e2e: $tool not found" >&2; exit 2; }
done

step() { echo; echo "==> $*"; }

created=0
if "$KIND" get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  step "reusing kind cluster $CLUSTER"
  mkdir -p "$(dirname "$KUBECONFIG")"
  "$KIND" export kubeconfig --name "$CLUSTER" --kubeconfig "$KUBECONFIG"
else
  step "creating kind cluster $CLUSTER (kind-config.yaml)"
  mkdir -p "$(dirname "$KUBECONFIG")"
  "$KIND" create cluster --name "$CLUSTER" --config kind-config.yaml --kubeconfig "$KUBECONFIG" \
    --image "$KIND_NODE_IMAGE" --wait 120s
  created=1
fi
cleanup() {
  local status=$?
  if [[ $status -ne 0 ]]; then
    echo "kind-e2e: failed; fabricsched logs:" >&2
    "$KUBECTL" -n "$NAMESPACE" logs deployment/fabricsched --all-containers --tail=100 >&2 || true
  fi
  if [[ $created -eq 1 && "${KIND_KEEP:-0}" != 1 ]]; then
    "$KIND" delete cluster --name "$CLUSTER" || true
  fi
  exit $status
}
trap cleanup EXIT

step "fake GPUs: 4 per worker"
hack/kind-gpu.sh 4 nvidia.com/gpu.present=true

step "building $IMAGE"
docker build -t "$IMAGE" .
step "loading $IMAGE into $CLUSTER"
"$KIND" load docker-image "$IMAGE" --name "$CLUSTER"

step "installing the chart into $NAMESPACE"
# Helm installs crds/ only on first install; apply them so a reused cluster gets the current ones.
"$KUBECTL" apply --server-side --force-conflicts -f crds/
"$HELM" upgrade --install fabricsched charts/fabricsched --namespace "$NAMESPACE" --create-namespace \
  --set image.repository="${IMAGE%:*}" --set image.tag="${IMAGE##*:}" --set image.pullPolicy=Never \
  --wait --timeout 5m
"$KUBECTL" -n "$NAMESPACE" rollout status deployment/fabricsched --timeout=180s

step "applying examples/kind-topology.yaml"
"$KUBECTL" apply -f examples/kind-topology.yaml
workers="$("$KUBECTL" get nodes -l nvidia.com/gpu.present=true -o name | wc -l)"
"$KUBECTL" wait fabrictopology/kind --for=jsonpath='{.status.nodes}'="$workers" --timeout=120s

step "tests/e2e"
FABRICSCHED_E2E=1 FABRICSCHED_E2E_TOPOLOGY=kind "$PYTHON" -m pytest tests/e2e -v ${PYTEST_ARGS:-}

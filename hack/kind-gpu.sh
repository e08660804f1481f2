#!/usr/bin/env bash
# Gives nodes fake GPU capacity: kind nodes have no GPUs and no device plugin, but the scheduler
# and fabricsched only count the extended resource in the node's status. Capacity is patched into
# status (the documented way to advertise an extended resource by hand) and kept by the kubelet
# until it re-registers the node. Allocatable is patched too: the kubelet would copy it from
# capacity on its next status update anyway, and a node without a kubelet (a test's fake Node)
# gets it at once.
#
#   hack/kind-gpu.sh [GPUS_PER_NODE] [LABEL_SELECTOR]
#   default: 4 GPUs on every node labelled nvidia.com/gpu.present=true
#
# Uses $KUBECTL (default: kubectl on PATH) and the current KUBECONFIG.
set -euo pipefail

gpus="${1:-4}"
selector="${2:-nvidia.com/gpu.present=true}"
resource="${GPU_RESOURCE:-nvidia.com/gpu}"
kubectl="${KUBECTL:-kubectl}"

if ! [[ "$gpus" =~ ^[0-9]+$ ]]; then
  echo "kind-gpu: GPUS_PER_NODE must be a whole number, got '$gpus'" >&2
  exit 2
fi

nodes="$("$kubectl" get nodes -l "$selector" -o jsonpath='{.items[*].metadata.name}')"
if [[ -z "$nodes" ]]; then
  echo "kind-gpu: no node matches '$selector'" >&2
  exit 1
fi

for node in $nodes; do
  # A merge patch, not the JSON Patch `add` of the Kubernetes docs: `add` needs the parent map, and a
  # Node with no status yet (made by hand, or before its kubelet reports) has no status.capacity;
  # the API server then answers 422, which kubectl prints as "The request is invalid". A merge
  # patch creates the maps and keeps every other resource a kubelet reported.
  "$kubectl" patch node "$node" --subresource=status --type=merge \
    -p "{\"status\": {\"capacity\": {\"$resource\": \"$gpus\"}, \"allocatable\": {\"$resource\": \"$gpus\"}}}" \
    >/dev/null
  echo "kind-gpu: $node capacity $resource=$gpus"
done

# The scheduler places by allocatable: check that it stuck (a kubelet that reserves part of the
# resource, or an admission webhook, would change it).
deadline=$((SECONDS + 60))
for node in $nodes; do
  until [[ "$("$kubectl" get node "$node" -o jsonpath="{.status.allocatable.${resource//./\\.}}")" == "$gpus" ]]; do
    if (( SECONDS > deadline )); then
      echo "kind-gpu: $node allocatable $resource did not reach $gpus within 60 s" >&2
      exit 1
    fi
    sleep 2
  done
done
echo "kind-gpu: $(wc -w <<<"$nodes") node(s) allocatable $resource=$gpus"

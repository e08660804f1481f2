#!/usr/bin/env bash
# Builds the local control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl) and helm from the Go module proxy, at the versions
# pinned in hack/*/go.mod, into ${FABRICSCHED_BIN_DIR:-$HOME/.cache/fabricsched/bin}.
# Each tool set lands in a folder named after its version, so a rerun with the
# same pins does nothing and a bump builds next to the old binaries.
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BIN_DIR="${FABRICSCHED_BIN_DIR:-$HOME/.cache/fabricsched/bin}"
export GOFLAGS="${GOFLAGS:-} -buildvcs=false -trimpath"
export CGO_ENABLED=0

module_version() { # <wrapper dir> <module path>
  (cd "$HACK_DIR/$1" && go list -m -f '{{.Version}}' "$2")
}

# build_set <name> <version> <wrapper dir> <ldflags> <binary>=<package>...
build_set() {
  local name="$1" version="$2" wrapper="$3" ldflags="$4"
  shift 4
  local dest="$BIN_DIR/$name-$version" missing=0 spec
  for spec in "$@"; do
    [[ -x "$dest/${spec%%=*}" ]] || missing=1
  done
  if [[ $missing -eq 0 ]]; then
    echo "build-tools: $name $version already in $dest"
    return
  fi
  local staging="$dest.partial.$$" started=$SECONDS pkgs=()
  rm -rf "$staging" && mkdir -p "$staging"
  for spec in "$@"; do pkgs+=("${spec#*=}"); done
  echo "build-tools: building $name $version (${*%%=*}) ..."
  (cd "$HACK_DIR/$wrapper" && go build -ldflags "$ldflags" -o "$staging/" "${pkgs[@]}")
  # Move into place only once every binary exists: an interrupted build leaves no half set.
  rm -rf "$dest" && mv "$staging" "$dest"
  echo "build-tools: $name $version built in $((SECONDS - started)) s, $(du -sh "$dest" | cut -f1) on disk"
}

kube_version="$(module_version kube k8s.io/kubernetes)"
kube_minor="$(echo "$kube_version" | cut -d. -f2)"
kube_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  kube_ldflags+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$kube_minor"
  kube_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
build_set kubernetes "$kube_version" kube "$kube_ldflags" \
  kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver \
  kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager \
  kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler \
  kubectl=k8s.io/kubernetes/cmd/kubectl

etcd_version="$(module_version etcd go.etcd.io/etcd/server/v3)"
build_set etcd "$etcd_version" etcd "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=release" \
  etcd=fabricsched.io/hack/etcd

helm_version="$(module_version helm helm.sh/helm/v3)"
# helm's default Capabilities.KubeVersion (for `helm template`/`lint` without a cluster) is a
# build-time variable; point it at the pinned Kubernetes minor, as helm's own release build does.
helm_ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$helm_version"
helm_ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
  helm_ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$kube_minor"
done
build_set helm "$helm_version-k8s1.$kube_minor" helm "$helm_ldflags" helm=helm.sh/helm/v3/cmd/helm

#!/usr/bin/env bash
# Builds the real binaries the harness runs (kube-apiserver, kube-controller-manager,
# kube-scheduler, etcd, kwok, the JobSet, LeaderWorkerSet and Kueue managers, the spokes'
# hostpath-provisioner), controller-gen, and helm, kustomize and promtool (for the chart
# tests), each from its own tools module under hack/tools, with exact versions from the Go
# module proxy.
#
# Every binary is cached under $TRAINYARD_CACHE/bin/<tool>-<hash of its go.mod+go.sum
# and of the Go files a tools module has of its own (hostpath-provisioner's main.go)>,
# so a later run (or CI on the same machine) rebuilds only what changed; bin/k8s in the
# repository is a folder of symlinks into that cache (KUBEBUILDER_ASSETS points at it).
#
# Usage: hack/build-tools.sh [tool ...]   (default: all)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${TRAINYARD_CACHE:-$HOME/.cache/trainyard}
OUT=$ROOT/bin/k8s
mkdir -p "$OUT" "$CACHE/bin"

K8S_VERSION=v1.36.2
V=k8s.io/component-base/version
CV=k8s.io/client-go/pkg/version
K8S_LDFLAGS="-s -w"
for p in $V $CV; do
  K8S_LDFLAGS+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=36"
  K8S_LDFLAGS+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
done

start=$(date +%s)
step() { echo "[build-tools +$(( $(date +%s) - start ))s] $*"; }

modhash() {
  local d=$ROOT/hack/tools/$1
  cat "$d/go.mod" "$d/go.sum" $(find "$d" -maxdepth 1 -name '*.go' | sort) | sha256sum | cut -c1-12
}

# build MODULE BINARY... : builds the named binaries of one tools module into the cache.
build() {
  local mod=$1; shift
  local dir="$CACHE/bin/$mod-$(modhash "$mod")"
  local missing=0
  for b in "$@"; do [ -x "$dir/$b" ] || missing=1; done
  if [ $missing = 1 ]; then
    step "building $mod: $*"
    mkdir -p "$dir.tmp"
    local t0; t0=$(date +%s)
    (cd "$ROOT/hack/tools/$mod" && build_$mod "$dir.tmp")
    rm -rf "$dir" && mv "$dir.tmp" "$dir"
    step "built $mod in $(( $(date +%s) - t0 ))s"
  else
    step "$mod: cached in $dir"
  fi
  for b in "$@"; do ln -sfn "$dir/$b" "$OUT/$b"; done
}

build_k8s() {
  go build -trimpath -ldflags "$K8S_LDFLAGS" -o "$1/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler
}
build_etcd() { go build -trimpath -ldflags "-s -w" -o "$1/etcd" go.etcd.io/etcd/server/v3; }
build_kwok() { go build -trimpath -ldflags "-s -w" -o "$1/kwok" sigs.k8s.io/kwok/cmd/kwok; }
build_jobset() { go build -trimpath -ldflags "-s -w" -o "$1/jobset" sigs.k8s.io/jobset; }
build_lws() { go build -trimpath -ldflags "-s -w" -o "$1/lws" sigs.k8s.io/lws/cmd; }
build_hostpath-provisioner() {
  go build -trimpath -ldflags "-s -w" -o "$1/hostpath-provisioner" .
}
build_kueue() { go build -trimpath -ldflags "-s -w" -o "$1/kueue" sigs.k8s.io/kueue/cmd/kueue; }
build_controller-gen() {
  go build -trimpath -ldflags "-s -w" -o "$1/controller-gen" sigs.k8s.io/controller-tools/cmd/controller-gen
}
# helm's own Makefile stamps its version and, from client-go's, the Kubernetes version it
# renders and lints for (the built-in default is 1.20, too old for the charts' kubeVersion).
build_helm() {
  local v kv ld
  v=$(go list -m -f '{{.Version}}' helm.sh/helm/v3)
  kv=$(go list -m -f '{{.Version}}' k8s.io/client-go) # v0.MINOR.PATCH
  kv=${kv#v0.}; kv=${kv%%.*}
  ld="-s -w -X helm.sh/helm/v3/internal/version.version=$v"
  for p in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ld+=" -X $p.k8sVersionMajor=1 -X $p.k8sVersionMinor=$kv"
  done
  go build -trimpath -ldflags "$ld" -o "$1/helm" helm.sh/helm/v3/cmd/helm
}
build_kustomize() { go build -trimpath -ldflags "-s -w" -o "$1/kustomize" sigs.k8s.io/kustomize/kustomize/v5; }
# promtool checks and unit-tests the hub chart's alert rules; remove_all_sd leaves out the
# service-discovery plugins (cloud SDKs) it never uses for rule files.
build_promtool() {
  go build -trimpath -tags remove_all_sd -ldflags "-s -w" -o "$1/promtool" github.com/prometheus/prometheus/cmd/promtool
}

tools=("$@")
[ ${#tools[@]} -gt 0 ] || tools=(etcd k8s kwok jobset lws kueue hostpath-provisioner controller-gen helm kustomize promtool)
for t in "${tools[@]}"; do
  case $t in
    k8s) build k8s kube-apiserver kube-controller-manager kube-scheduler ;;
    etcd|kwok|jobset|lws|kueue|hostpath-provisioner|controller-gen|helm|kustomize|promtool) build "$t" "$t" ;;
    *) echo "unknown tool $t" >&2; exit 2 ;;
  esac
done
# envtest looks for kubectl beside the control plane.
[ -e "$OUT/kubectl" ] || ! command -v kubectl >/dev/null || ln -sfn "$(command -v kubectl)" "$OUT/kubectl"
step "done"

#!/usr/bin/env bash
# Builds the local cluster's upstream binaries from the Go module proxy, once,
# into a cache outside the repo keyed by version:
#   $NIGHTSHIFT_CACHE/bin/<name>-<version>/<binary>
# Usage: hack/build-upstream.sh [all|etcd|kubernetes|kwok|karpenter|mpi-operator|versitygw|crds|argo]...
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.sh
. "$here/versions.sh"
CACHE=${NIGHTSHIFT_CACHE:-$HOME/.cache/nightshift}
mkdir -p "$CACHE/bin" "$CACHE/src"
export GOFLAGS=-mod=mod GOTOOLCHAIN=${GOTOOLCHAIN:-auto} CGO_ENABLED=0
export GOPROXY=${GOPROXY:-https://proxy.golang.org,direct}

die() { echo "build-upstream: $*" >&2; exit 1; }
command -v go >/dev/null || die "Go is not installed: run \`make deps\` (Debian 12: golang-1.23 from bookworm-backports) or install Go >= 1.21 and put it on PATH."

# wrapper <dir> <module-lines...>: a throwaway module that requires what we build.
wrapper() {
  local dir=$1; shift
  mkdir -p "$dir"
  printf 'module nightshift.local/build\n\ngo 1.24\n' >"$dir/go.mod"
  printf '%s\n' "$@" >>"$dir/go.mod"
}

# built <name> <version> <binaries...>: true when every binary is already cached.
built() {
  local d="$CACHE/bin/$1-$2"; shift 2
  for b in "$@"; do [ -x "$d/$b" ] || return 1; done
}

step() { printf '==> %s\n' "$*"; }

build_etcd() {
  built etcd "$ETCD_VERSION" etcd && return
  step "etcd $ETCD_VERSION"
  local w="$CACHE/src/etcd-$ETCD_VERSION"
  wrapper "$w" "require go.etcd.io/etcd/server/v3 $ETCD_VERSION"
  (cd "$w" && go mod download go.etcd.io/etcd/server/v3 && go get go.etcd.io/etcd/server/v3@"$ETCD_VERSION" \
    && go build -trimpath -ldflags '-s -w' -o "$CACHE/bin/etcd-$ETCD_VERSION/etcd" go.etcd.io/etcd/server/v3) \
    || die "building etcd $ETCD_VERSION failed (see above). Is the Go module proxy reachable?"
}

build_kubernetes() {
  local bins=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)
  built kubernetes "$KUBERNETES_VERSION" "${bins[@]}" && return
  step "kubernetes $KUBERNETES_VERSION (kube-apiserver, controller-manager, scheduler, kubelet, kube-proxy; ~6-10 min cold on 2 cores)"
  local w="$CACHE/src/kubernetes-$KUBERNETES_VERSION"
  mkdir -p "$w"
  # k8s.io/kubernetes points its staging modules at ./staging; map each to its
  # published version instead. The list comes from that version's own go.mod.
  local gomod
  gomod=$(cd "$w" && go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  [ -f "$gomod" ] || die "could not download k8s.io/kubernetes@$KUBERNETES_VERSION from the Go module proxy"
  local replaces
  replaces=$(sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' "$gomod" \
    | while read -r m; do echo "replace $m => $m $KUBERNETES_STAGING_VERSION"; done)
  local pkgs=() tools=() b
  for b in "${bins[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); tools+=("tool k8s.io/kubernetes/cmd/$b"); done
  # `tool` lines keep the requirement through `go mod tidy` (nothing imports it).
  wrapper "$w" "require k8s.io/kubernetes $KUBERNETES_VERSION" "$replaces" "${tools[@]}"
  local v=$KUBERNETES_VERSION minor=${KUBERNETES_VERSION#v1.}; minor=${minor%%.*}
  local ld="-s -w -X k8s.io/component-base/version.gitVersion=$v -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
  ld="$ld -X k8s.io/client-go/pkg/version.gitVersion=$v -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
  (cd "$w" && go mod tidy && go build -trimpath -ldflags "$ld" -o "$CACHE/bin/kubernetes-$KUBERNETES_VERSION/" "${pkgs[@]}") \
    || die "building kubernetes $KUBERNETES_VERSION failed (see above)"
}

build_kwok() {
  built kwok "$KWOK_VERSION" kwok && return
  step "kwok $KWOK_VERSION"
  GOBIN="$CACHE/bin/kwok-$KWOK_VERSION" go install -trimpath -ldflags '-s -w' "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" \
    || die "building kwok $KWOK_VERSION failed (see above)"
}

build_karpenter() {
  built karpenter "$KARPENTER_VERSION" karpenter-kwok && return
  step "karpenter $KARPENTER_VERSION with its KWOK provider"
  local w="$CACHE/src/karpenter-$KARPENTER_VERSION"
  wrapper "$w" "require sigs.k8s.io/karpenter $KARPENTER_VERSION" "tool sigs.k8s.io/karpenter/kwok"
  (cd "$w" && go mod tidy && go build -trimpath -ldflags '-s -w' -o "$CACHE/bin/karpenter-$KARPENTER_VERSION/karpenter-kwok" sigs.k8s.io/karpenter/kwok) \
    || die "building karpenter $KARPENTER_VERSION failed (see above)"
}

# The Kubeflow MPI Operator runs MPI stages (MPIJob v2beta1: launcher + workers, ssh
# keys, hostfile, gang start with WaitForWorkersReady), like Karpenter a host process.
build_mpioperator() {
  built mpi-operator "$MPI_OPERATOR_VERSION" mpi-operator && return
  step "mpi-operator $MPI_OPERATOR_VERSION (Kubeflow MPIJob controller)"
  local w="$CACHE/src/mpi-operator-$MPI_OPERATOR_VERSION"
  wrapper "$w" "require github.com/kubeflow/mpi-operator $MPI_OPERATOR_VERSION" "tool github.com/kubeflow/mpi-operator/cmd/mpi-operator"
  (cd "$w" && go mod tidy && go build -trimpath -ldflags '-s -w' -o "$CACHE/bin/mpi-operator-$MPI_OPERATOR_VERSION/mpi-operator" github.com/kubeflow/mpi-operator/cmd/mpi-operator) \
    || die "building mpi-operator $MPI_OPERATOR_VERSION failed (see above)"
}

build_versitygw() {
  built versitygw "$VERSITYGW_VERSION" versitygw && return
  step "versitygw $VERSITYGW_VERSION (S3-compatible server for tests)"
  GOBIN="$CACHE/bin/versitygw-$VERSITYGW_VERSION" go install -trimpath -ldflags '-s -w' "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION" \
    || die "building versitygw $VERSITYGW_VERSION failed (see above)"
}

# Argo Workflows' controller, for bench/argo.py only (not in `all`: CI never needs it).
# Its go.mod replaces tablewriter; a dependent module must repeat that replace.
build_argo() {
  built argo-workflows "$ARGO_VERSION" workflow-controller && return
  step "argo workflow-controller $ARGO_VERSION (bench only; ~10 min cold on 2 cores)"
  local w="$CACHE/src/argo-workflows-$ARGO_VERSION"
  wrapper "$w" "require github.com/argoproj/argo-workflows/v3 $ARGO_VERSION" \
    "replace github.com/olekukonko/tablewriter => github.com/olekukonko/tablewriter v0.0.5" \
    "tool github.com/argoproj/argo-workflows/v3/cmd/workflow-controller"
  (cd "$w" && go mod tidy && go build -trimpath -ldflags '-s -w' -o "$CACHE/bin/argo-workflows-$ARGO_VERSION/workflow-controller" github.com/argoproj/argo-workflows/v3/cmd/workflow-controller) \
    || die "building argo workflow-controller $ARGO_VERSION failed (see above)"
}

# CRDs and data files come from module sources; download them into the module cache.
fetch_crds() {
  step "karpenter CRDs (core $KARPENTER_VERSION, AWS $KARPENTER_AWS_VERSION), the MPIJob CRD and kwok stages"
  local w="$CACHE/src/crds"
  wrapper "$w"
  (cd "$w" && go mod download "sigs.k8s.io/karpenter@$KARPENTER_VERSION" "github.com/aws/karpenter-provider-aws@$KARPENTER_AWS_VERSION" "sigs.k8s.io/kwok@$KWOK_VERSION" "github.com/kubeflow/mpi-operator@$MPI_OPERATOR_VERSION") \
    || die "downloading CRD sources failed (see above)"
}

targets=("$@"); [ ${#targets[@]} -gt 0 ] || targets=(all)
for t in "${targets[@]}"; do
  case $t in
    all) build_etcd; fetch_crds; build_kwok; build_karpenter; build_mpioperator; build_kubernetes; build_versitygw ;;
    etcd) build_etcd ;; kubernetes) build_kubernetes ;; kwok) build_kwok ;;
    karpenter) build_karpenter ;; mpi-operator) build_mpioperator ;; versitygw) build_versitygw ;; crds) fetch_crds ;;
    argo) build_argo ;;
    *) die "unknown target '$t' (all|etcd|kubernetes|kwok|karpenter|mpi-operator|versitygw|crds|argo)" ;;
  esac
done

#!/usr/bin/env bash
# The e2e subset on kind, as a collaboration's CI runs it (examples/ci), here:
#   1. hack/kind.sh all: kind, kubeadm, CoreDNS and the node image built here (cached),
#      then `kind create cluster`;
#   2. our :dev images copied in from the local cluster's real node (make images);
#   3. hack/e2e.sh against kind: the chart installed with Helm, the simulated examples/ci
#      runs as real pods (the runner image's /bin/sh stands in for busybox);
#   4. the kind cluster deleted again (E2E_KEEP_KIND=1 keeps it).
# Needs root and the local cluster up with its real node (the images' source).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
KIND_DIR=${NIGHTSHIFT_KIND_DIR:-${NIGHTSHIFT_CACHE:-$HOME/.cache/nightshift}/kind}
down() { [ -n "${E2E_KEEP_KIND:-}" ] || bash hack/kind.sh down >/dev/null 2>&1; }
trap down EXIT
bash hack/kind.sh all || { echo "e2e-kind: kind did not come up (docs/kind.md)" >&2; exit 1; }
bash hack/kind.sh load docker.io/library/nightshift-operator:dev docker.io/library/nightshift-runner:dev \
  || exit 1
KUBECONFIG=$KIND_DIR/kubeconfig E2E_VALUES=hack/kind-e2e-values.yaml \
  E2E_POD_IMAGE=nightshift-runner:dev bash hack/e2e.sh

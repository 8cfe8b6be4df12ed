#!/usr/bin/env bash
# `make e2e`: Nightshift as a collaboration's CI uses it (examples/ci), on any cluster:
#   1. the examples validated offline (nightshift validate);
#   2. the CRDs applied and charts/nightshift installed with Helm (release nightshift-e2e,
#      standalone, watching only the e2e runs' namespace, so other operators and runs on
#      the cluster are left alone);
#   3. examples/ci's PipelineRuns simulated (examples/ci/simulate.py), validated, applied,
#      and watched to the end with `nightshift watch`; their status printed;
#   4. everything uninstalled again (E2E_KEEP=1 keeps it). Exit 0 only if every run
#      succeeded.
# The cluster: $KUBECONFIG, else the local cluster's when it is up.
#   - The local cluster (it has the real node nightshift-real): the operator is the
#     :dev image `make images` put on the real node; the simulated pods run on a KWOK
#     node pool, where they only pretend to run.
#   - Any other cluster (kind, EKS): E2E_VALUES names a values file with the images the
#     cluster can pull (e.g. `image: {repository: <registry>/nightshift-operator, tag: x}`);
#     the pods are busybox (E2E_POD_IMAGE).
# E2E_OPERATOR=host runs the operator as a process on this machine (as the integration
# tests do) instead of installing the chart: for clusters without the operator image.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
# shellcheck source=versions.env
. hack/versions.env
venv=${VENV:-.venv}
py=$venv/bin/python
CACHE=${NIGHTSHIFT_CACHE:-$HOME/.cache/nightshift}
tools=$CACHE/bin/kubectl-layer-$KUBECTL_LAYER_PACKAGE
KUBECTL=$(command -v kubectl || echo "$tools/kubectl"); [ -x "$tools/kubectl" ] && KUBECTL=$tools/kubectl
HELM=$(command -v helm || echo "$tools/helm"); [ -x "$tools/helm" ] && HELM=$tools/helm
RELEASE=nightshift-e2e OPNS=nightshift-e2e RUNS=nightshift-e2e-runs POOL=e2e
TIMEOUT=${E2E_TIMEOUT:-600}
OPERATOR=${E2E_OPERATOR:-chart}
op_pid=""

die() { echo "e2e: $*" >&2; exit 1; }
step() { printf '==> %s\n' "$*"; }
if [ -z "${KUBECONFIG:-}" ]; then
  [ -s .localcluster/kubeconfig ] || die "set KUBECONFIG, or start the local cluster (make cluster-up)"
  export KUBECONFIG=$root/.localcluster/kubeconfig
fi
k() { "$KUBECTL" "$@"; }
k version >/dev/null 2>&1 || die "the cluster at $KUBECONFIG does not answer"
work=$(mktemp -d)

# shellcheck disable=SC2317  # reached through the EXIT trap below
cleanup() {
  [ -n "${E2E_KEEP:-}" ] && { echo "e2e: kept (E2E_KEEP): release $RELEASE, namespaces $OPNS $RUNS"; return; }
  [ -n "$op_pid" ] && kill "$op_pid" 2>/dev/null
  [ "$OPERATOR" = chart ] && "$HELM" uninstall "$RELEASE" -n "$OPNS" --wait >/dev/null 2>&1
  k delete namespace "$RUNS" "$OPNS" --wait=false >/dev/null 2>&1 || true
  [ "$mode" = local ] && k delete node "kwok-$POOL" --wait=false >/dev/null 2>&1
  rm -rf "$work"
}
mode=other
trap cleanup EXIT

step "nightshift validate: examples/"
"$venv/bin/nightshift" validate examples/virtualcluster-eks.yaml examples/ci/manifests || exit 1
"$venv/bin/nightshift" validate --provider kwok examples/virtualcluster-local.yaml || exit 1

sim=(--items 3 --seconds 2)
real_node=$("$py" -c 'from nightshift_localcluster.nodeconfig import NODE_NAME; print(NODE_NAME)') \
  || die "the test bed's package (nightshift_localcluster) does not import: make venv"
if k get node "$real_node" >/dev/null 2>&1; then
  mode=local
  step "local cluster: the operator on the real node (:dev images), pods on KWOK pool $POOL"
  "$py" - "$RUNS" >"$work/values.json" <<'PY' || die "no chart values for the local cluster"
import json, sys
from nightshift_localcluster import helminstall
print(json.dumps(helminstall.local_values(watch_namespaces=[sys.argv[1]],
                                          extra={"peering": {"enabled": False}})))
PY
  problem=$("$py" -c 'import sys
from nightshift_localcluster import helminstall as h
print(h.real_node_problem(h.real_node([sys.argv[1]])) or "")' "$KUBECTL") || die "cannot inspect the real node"
  [ -z "$problem" ] || [ "$OPERATOR" = host ] || die "$problem (or E2E_OPERATOR=host)"
  "$py" -c "import json; from tests.integration.prutil import kwok_node_pool; print(json.dumps(kwok_node_pool('$POOL')))" \
    | k apply -f - >/dev/null || die "creating the KWOK node kwok-$POOL failed"
  sim+=(--pool "$POOL" --pod-annotation pod-complete.stage.kwok.x-k8s.io/delay=2s)
else
  step "cluster at $KUBECONFIG: images from ${E2E_VALUES:-the chart defaults}, busybox pods"
  printf '{"watchNamespaces": ["%s"], "peering": {"enabled": false}}\n' "$RUNS" >"$work/values.json"
  sim+=(--image "${E2E_POD_IMAGE:-busybox:1.36}")
fi
values=(-f "$work/values.json"); [ -n "${E2E_VALUES:-}" ] && values=(-f "$E2E_VALUES" "${values[@]}")

step "CRDs"
k apply --server-side --force-conflicts -f crds/ >/dev/null || die "applying crds/ failed"
# Polled, not `kubectl wait --for=condition=Established`: that fails at once on a CRD
# whose status has no conditions yet, as a just-created one may.
established() {
  [ "$(k get crd "$1" -o jsonpath='{.status.conditions[?(@.type=="Established")].status}' 2>/dev/null)" = True ]
}
for crd in pipelineruns virtualclusters sharedstorages; do
  for _ in $(seq 120); do established "$crd.nightshift.io" && break; sleep 0.5; done
  established "$crd.nightshift.io" || die "CRD $crd not established after 60 s"
done
# The runs' namespace first: the chart puts the operator's Role for it there.
k create namespace "$RUNS" >/dev/null 2>&1 || true
if [ "$OPERATOR" = host ]; then
  step "the operator as a host process, watching $RUNS (E2E_OPERATOR=host)"
  "$venv/bin/nightshift" operator -n "$RUNS" --health-port 0 >"$work/operator.log" 2>&1 &
  op_pid=$!
else
  step "helm install $RELEASE (charts/nightshift)"
  "$HELM" upgrade --install "$RELEASE" charts/nightshift -n "$OPNS" --create-namespace "${values[@]}" \
    --wait --timeout 3m >"$work/helm.log" 2>&1 || { cat "$work/helm.log"; die "helm install failed"; }
fi

step "simulated runs of examples/ci/manifests in namespace $RUNS"
"$py" examples/ci/simulate.py examples/ci/manifests "${sim[@]}" -o "$work/sim.yaml" || exit 1
"$venv/bin/nightshift" validate "$work/sim.yaml" || exit 1
k apply -n "$RUNS" -f "$work/sim.yaml" || die "applying the simulated runs failed"

status=0
for run in $(k get pipelineruns -n "$RUNS" -o jsonpath='{.items[*].metadata.name}'); do
  step "watch $run"
  timeout "$TIMEOUT" "$venv/bin/nightshift" watch -n "$RUNS" "$run" </dev/null >"$work/watch-$run.log" 2>&1 \
    || { status=1; echo "e2e: $run did not succeed"; }
  "$venv/bin/nightshift" status -n "$RUNS" "$run" || true
done
if [ $status -ne 0 ]; then
  k get pods,jobs -n "$RUNS" -o wide || true
  if [ -n "$op_pid" ]; then tail -n 60 "$work/operator.log"
  else k logs -n "$OPNS" -l app.kubernetes.io/instance="$RELEASE" --tail=60 || true; fi
fi
[ $status -eq 0 ] && echo "e2e: every simulated run succeeded" || echo "e2e: FAILED"
exit $status

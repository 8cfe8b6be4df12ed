#!/usr/bin/env bash
# `make integration`: the integration suite on the local cluster, real node included.
#   1. start the local cluster (left as it was found: a cluster already up stays up);
#   2. build our images into the real node's containerd when the cluster has one;
#   3. run pytest tests/integration (with $KUBECONFIG set, steps 1-2 are skipped and the
#      suite runs against that cluster instead);
#   4. after a whole-suite pass, the e2e subset on kind (hack/e2e-kind.sh).
# pytest's exit code is the script's: 5 (no tests collected) fails make and CI. The
# `disruptive` tests (tests/integration/test_faults.py) run alone after the rest.
# NIGHTSHIFT_TEST_WORKERS (default 6) pytest-xdist workers share the cluster: each has
# its own operator watching only its own namespaces (conftest.py); a file's tests stay on
# one worker (--dist loadfile), so a file's order and module fixtures hold. The tests
# mostly wait on the cluster: on two cores, two workers kept them 38 % busy, six 78 %
# (docs/contributing.md). Files go out longest first (conftest.py's LONG_FILES_FIRST).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
venv=${VENV:-.venv}
lc="$venv/bin/nightshift-localcluster"

workers=${NIGHTSHIFT_TEST_WORKERS:-6}
args=(tests/integration --durations=15)
[ "$workers" -gt 1 ] && args+=(-n "$workers" --dist loadfile --no-loadscope-reorder)

# Each phase's wall time, so a slow CI run says where its minutes went.
t0=$SECONDS
took() { echo "integration: $1 took $((SECONDS - t0)) s"; t0=$SECONDS; }

# Two phases: everything else in parallel, then the `disruptive` tests (they restart the
# API server or etcd every test shares) alone. Exit 5 (nothing collected) counts only
# when neither phase collected anything.
suite() {
  "$venv/bin/pytest" "${args[@]}" -m "not disruptive" "$@"
  local rc1=$?
  took "the suite without the disruptive tests"
  [ "$rc1" != 0 ] && [ "$rc1" != 5 ] && return "$rc1"
  "$venv/bin/pytest" tests/integration -p no:xdist -m disruptive --durations=5 "$@"
  local rc2=$?
  took "the disruptive tests"
  if [ "$rc1" = 5 ] && [ "$rc2" = 5 ]; then return 5; fi
  [ "$rc2" = 5 ] && rc2=0
  return "$rc2"
}

if [ -n "${KUBECONFIG:-}" ]; then
  suite "$@"
  exit $?
fi
was_up=0
"$lc" status >/dev/null 2>&1 && was_up=1
"$lc" up || exit 1
took "starting the local cluster"
# shellcheck disable=SC2317  # reached through the EXIT trap below
stop() { [ "$was_up" = 1 ] || [ -n "${NIGHTSHIFT_KEEP_CLUSTER:-}" ] || "$lc" down; }
trap stop EXIT
state=${NIGHTSHIFT_LOCALCLUSTER_DIR:-$root/.localcluster}
if [ -S "$state/realnode/containerd/containerd.sock" ]; then
  bash hack/images.sh || { echo "integration: building images failed (see above)" >&2; exit 1; }
  took "building the images"
else
  echo "integration: no real node in this cluster; its tests will be skipped"
fi
suite "$@"
rc=$?
# After a whole-suite pass, the e2e subset on kind (hack/e2e-kind.sh: a kind cluster
# built here, the chart installed with Helm, the simulated examples/ci runs), as a
# collaboration's CI runs it; `make e2e` runs the same hack/e2e.sh on any KUBECONFIG.
# Without the real node (the images' source) it runs on the local cluster instead.
if [ "$rc" = 0 ] && [ $# = 0 ]; then
  if [ -S "$state/realnode/containerd/containerd.sock" ]; then
    VENV=$venv bash hack/e2e-kind.sh
  else
    VENV=$venv bash hack/e2e.sh
  fi
  rc=$?
  took "the e2e subset"
fi
exit "$rc"

#!/usr/bin/env bash
# `make integration`: the integration suite on the local cluster, real node included.
#   1. start the local cluster (left as it was found: a cluster already up stays up);
#   2. build our images into the real node's containerd when the cluster has one;
#   3. run pytest tests/integration (with $KUBECONFIG set, steps 1-2 are skipped and the
#      suite runs against that cluster instead), with `make test` the unit tests beside
#      its parallel phase at nice 19 (NIGHTSHIFT_UNIT_BESIDE);
#   4. in a whole-suite run, the e2e subset on kind (hack/e2e-kind.sh), from the parallel
#      phase's tail (once every file has started) and beside the disruptive tests; it is
#      stopped if the parallel phase fails. Its Go tools are built beforehand, beside the
#      parallel phase, at nice 19.
# pytest's exit code is the script's: 5 (no tests collected) fails make and CI. The
# `disruptive` tests (tests/integration/test_faults.py) run after the rest, the only
# tests on the local cluster then.
# NIGHTSHIFT_TEST_WORKERS (default 6) pytest-xdist workers share the cluster: each has
# its own operator watching only its own namespaces (conftest.py); a file's tests stay on
# one worker (--dist loadfile), so a file's order and module fixtures hold. The tests
# mostly wait on the cluster: on two cores, six workers kept them 72 % busy, eight 86 %
# and 40-150 s sooner, but eight failed tests on the bed's timing in three of eight
# runs (docs/contributing.md). Files go out longest first (conftest.py's
# LONG_FILES_FIRST).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
venv=${VENV:-.venv}
lc="$venv/bin/nightshift-localcluster"

workers=${NIGHTSHIFT_TEST_WORKERS:-6}
# -rs: a skipped test names itself and its reason in the summary (CI must show it).
args=(tests/integration --durations=15 -rs)
[ "$workers" -gt 1 ] && args+=(-n "$workers" --dist loadfile --no-loadscope-reorder)

# Each phase's wall time, so a slow CI run says where its minutes went.
t0=$SECONDS
took() { echo "integration: $1 took $((SECONDS - t0)) s"; t0=$SECONDS; }

# Two phases: everything else in parallel, then the `disruptive` tests (they restart the
# API server or etcd every test shares) alone. Exit 5 (nothing collected) counts only
# when neither phase collected anything. With kind_beside=1 (a whole-suite run with the
# real node) the kind e2e subset runs from the first phase's tail and during the
# disruptive tests: it has its own cluster and only reads images from the real node's
# containerd, so the API server's restarts do not touch it (about 90 s saved; and 40 to
# 57 s more since it no longer waits for the first phase's end).
# Jobs beside another phase: each in its own process group (setsid: one kill stops all
# of it, pytest-xdist's workers or go's compilers included), its output kept in a file
# until it is waited for. `beside NAME CMD...` starts one; `beside_wait NAME [last]`
# waits, prints its output (with `last`, only the last line when it passed) and returns
# its exit code; `beside_stop NAME` stops it if it still runs. NAME_pid and NAME_log
# hold its state (globals, or locals of the caller).
beside() {
  local -n b_pid=$1_pid b_log=$1_log
  b_log=$(mktemp "${TMPDIR:-/tmp}/nightshift-$1.XXXXXX")
  shift
  setsid "$@" >"$b_log" 2>&1 &
  b_pid=$!
}
beside_wait() {
  local -n b_pid=$1_pid b_log=$1_log
  [ -n "$b_pid" ] || return 0
  wait "$b_pid"
  local rc=$?
  b_pid=""
  if [ "$rc" = 0 ] && [ "${2:-}" = last ]; then tail -n 1 "$b_log"; else cat "$b_log"; fi
  rm -f "$b_log"
  return "$rc"
}
# shellcheck disable=SC2317  # reached through the EXIT traps below
beside_stop() {
  local -n b_pid=$1_pid
  [ -n "$b_pid" ] || return 0
  kill -TERM -- "-$b_pid" 2>/dev/null
  beside_wait "$1" >/dev/null
}

kind_beside=0
# shellcheck disable=SC2034  # set and read through beside's namerefs
e2e_kind_pid="" e2e_kind_log=""
suite() {
  # The kind subset waits for the parallel phase's tail (conftest.py writes
  # NIGHTSHIFT_TAIL_MARKER once every file has started), then runs on the cores the idle
  # workers leave and beside the disruptive tests; the waiter gives up if this shell ends.
  local tail_marker=""
  if [ "$kind_beside" = 1 ]; then
    tail_marker=$(mktemp -u "${TMPDIR:-/tmp}/nightshift-tail.XXXXXX")
    echo "integration: the kind e2e subset starts in the parallel phase's tail (its output follows the disruptive tests)"
    # shellcheck disable=SC2016  # expanded by the inner bash
    beside e2e_kind bash -c 'while [ ! -e "$1" ]; do kill -0 "$2" 2>/dev/null || exit 1; sleep 1; done
      rm -f "$1"; echo "integration: the kind e2e subset started at $(date +%T)"
      exec env VENV="$3" bash hack/e2e-kind.sh' _ "$tail_marker" "$$" "$venv"
  fi
  NIGHTSHIFT_TAIL_MARKER=$tail_marker "$venv/bin/pytest" "${args[@]}" -m "not disruptive" "$@"
  local rc1=$?
  took "the suite without the disruptive tests"
  unit_done
  local rc_unit=$?
  if [ "$rc1" != 0 ]; then
    # Failed, or nothing collected (5): no kind subset either way.
    beside_stop e2e_kind
    [ "$rc1" != 5 ] && return "$rc1"
  elif [ -n "$tail_marker" ]; then
    touch "$tail_marker"  # a tail never seen: start it now
  fi
  [ "$rc_unit" != 0 ] && { beside_stop e2e_kind; return "$rc_unit"; }
  "$venv/bin/pytest" tests/integration -p no:xdist -m disruptive --durations=5 -rs "$@"
  local rc2=$?
  took "the disruptive tests"
  if [ -n "$e2e_kind_pid" ]; then
    beside_wait e2e_kind
    local rc3=$?
    kind_parts_ready
    took "waiting for the kind e2e subset after them"
    [ "$rc3" != 0 ] && { echo "integration: the kind e2e subset failed (rc $rc3)" >&2; return "$rc3"; }
  fi
  if [ "$rc1" = 5 ] && [ "$rc2" = 5 ]; then return 5; fi
  [ "$rc2" = 5 ] && rc2=0
  return "$rc2"
}

# The kind e2e subset's Go tools (kind, kubeadm, CoreDNS: CPU, little I/O) are built
# beside the parallel phase at nice 19: cold, minutes of compiling that otherwise ran
# after the disruptive tests; warm, a check. Its I/O-heavy parts (debootstrap's root
# filesystem, the node image in docker) stay with the subset, from the phase's tail on:
# built beside the whole parallel phase they slowed it (etcd's writes; 738 s against
# 565 s). The subset waits for the tools on kind.sh's lock.
# shellcheck disable=SC2034  # set and read through beside's namerefs
kind_prebuild_pid="" kind_prebuild_log=""
prebuild_kind_parts() {
  local low=(nice -n 19)
  command -v ionice >/dev/null && low+=(ionice -c 3)
  # shellcheck disable=SC2016  # expanded by the inner bash
  beside kind_prebuild bash -c 's=$SECONDS; "$@"; rc=$?
    echo "integration: kind'"'"'s Go tools built ahead in $((SECONDS - s)) s (rc $rc)"
    exit "$rc"' _ "${low[@]}" bash hack/kind.sh tools
}
# Waits for that build and says how it went (its whole log if it failed: the subset
# tried again after it and failed with its own message).
kind_parts_ready() { beside_wait kind_prebuild last; }

# With NIGHTSHIFT_UNIT_BESIDE=1 (`make test`) the unit tests run beside the integration
# suite's parallel phase, at nice 19: that phase waits on the cluster and left about a
# quarter of the two cores idle, which the unit tests (about 200 CPU seconds) fill.
# Beside the cluster's start and the image build instead they had been the longest part
# there, 40 to 70 s after the images. Their output follows the parallel phase; a failure
# stops the run there, before the disruptive tests. Same pytest arguments as the suite.
# shellcheck disable=SC2034  # set and read through beside's namerefs
unit_pid="" unit_log=""
start_unit() {
  [ "${NIGHTSHIFT_UNIT_BESIDE:-}" = 1 ] || return 0
  echo "integration: the unit tests run beside the parallel phase (their output follows it)"
  beside unit nice -n 19 "$venv/bin/pytest" tests/unit -n 2 "$@"
}
unit_done() {
  [ -n "$unit_pid" ] || return 0
  beside_wait unit
  local rc=$?
  took "waiting for the unit tests after that"
  [ "$rc" = 0 ] && return 0
  echo "integration: the unit tests failed (rc $rc); the disruptive tests did not run" >&2
  return "$rc"
}

# The real-node tests look for our images in the Node's status (a test that found none
# would skip), which the kubelet fills from an image list it refreshes every 30 s: right
# after `make images` a test dispatched first could miss them. Wait until all are there.
# A subshell: the cluster's env must not reach pytest (KUBECONFIG means "not local").
wait_node_images() (
  eval "$("$lc" env)"
  local want have missing=""
  want=$(ctr --address "$sock" -n k8s.io images ls -q | grep '^docker.io/library/nightshift-' | sort -u)
  for _ in $(seq 1 60); do
    have=$(kubectl get node "$NIGHTSHIFT_REAL_NODE_NAME" -o jsonpath='{.status.images[*].names[*]}' \
      | tr ' ' '\n' | sort -u)
    missing=$(comm -23 <(echo "$want") <(echo "$have"))
    [ -z "$missing" ] && return 0
    sleep 2
  done
  echo "integration: after 120 s the real node's status still lacks: $(tr '\n' ' ' <<<"$missing")" >&2
  return 1
)

trap 'beside_stop unit' EXIT
if [ -n "${KUBECONFIG:-}" ]; then
  start_unit "$@"
  suite "$@"
  exit $?
fi
was_up=0
"$lc" status >/dev/null 2>&1 && was_up=1
"$lc" up || exit 1
took "starting the local cluster"
# shellcheck disable=SC2317  # reached through the EXIT trap below
stop() {
  beside_stop unit
  # Tools built ahead for a kind subset that did not run (the suite failed): stop them.
  beside_stop kind_prebuild
  beside_stop e2e_kind
  [ "$was_up" = 1 ] || [ -n "${NIGHTSHIFT_KEEP_CLUSTER:-}" ] || "$lc" down
}
trap stop EXIT
state=${NIGHTSHIFT_LOCALCLUSTER_DIR:-$root/.localcluster}
sock=$state/realnode/containerd/containerd.sock
real_node=0
[ -S "$sock" ] && real_node=1
if [ "$real_node" = 1 ]; then
  bash hack/images.sh || { echo "integration: building images failed (see above)" >&2; exit 1; }
  took "building the images"
  wait_node_images || exit 1
  took "waiting for the real node to list them"
else
  echo "integration: no real node in this cluster; its tests will be skipped"
fi
start_unit "$@"
# After a whole-suite pass, the e2e subset on kind (hack/e2e-kind.sh: a kind cluster
# built here, the chart installed with Helm, the simulated examples/ci runs), as a
# collaboration's CI runs it; `make e2e` runs the same hack/e2e.sh on any KUBECONFIG.
# With the real node (the images' source) it runs beside the disruptive tests (suite);
# without it, on the local cluster, after them, since it would share their outages.
[ "$real_node" = 1 ] && [ $# = 0 ] && kind_beside=1 && prebuild_kind_parts
suite "$@"
rc=$?
if [ "$rc" = 0 ] && [ $# = 0 ] && [ "$real_node" = 0 ]; then
  VENV=$venv bash hack/e2e.sh
  rc=$?
  took "the e2e subset"
fi
exit "$rc"

#!/usr/bin/env bash
# Builds Nightshift's images into the local cluster's containerd, without a registry:
#   hack/images.sh            # base (if not cached), then every Dockerfile
#   hack/images.sh base       # only the base image
#   hack/images.sh build DIR  # only DIR/Dockerfile (e.g. images/runner, or .)
#
# Every Dockerfile takes its base as `ARG BASE=<public image>` then `FROM ${BASE}`; here
# BASE is a Debian bookworm root filesystem made with debootstrap (python3 + pip, so it
# stands in for python:3.11-slim-bookworm, which no registry here serves). Debian's
# dockerd, run by hand (own data dir, no iptables, no bridge), builds each Dockerfile;
# one `docker save | ctr -n k8s.io images import -` of everything built loads it into the
# containerd of the local cluster's real node, tagged <name>:dev:
#   images/<name>/Dockerfile -> nightshift-<name>:dev
#   ./Dockerfile (operator)  -> nightshift-operator:dev
# Caches: $NIGHTSHIFT_CACHE/images/rootfs-<recipe>-<content>.tar (the root filesystem,
# named by the suite, package list and host CAs, then by its package versions; checked
# for Debian's updates once a week: hack/debian-base.sh) and $NIGHTSHIFT_CACHE/docker
# (dockerd's layers), so a warm run rebuilds only what changed, and imports only images whose docker ID differs
# from what the node's containerd last imported (or that it no longer lists).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
CACHE=${NIGHTSHIFT_CACHE:-$HOME/.cache/nightshift}
STATE=${NIGHTSHIFT_LOCALCLUSTER_DIR:-$root/.localcluster}
TAG=${NIGHTSHIFT_IMAGE_TAG:-dev}
SUITE=bookworm
MIRROR=${NIGHTSHIFT_DEBIAN_MIRROR:-http://deb.debian.org/debian}
BASE_PKGS=python3,python3-pip,python3-venv,ca-certificates
# The host's own extra CAs (a TLS-inspecting proxy's, a company's) go into the base too,
# so pip inside builds trusts what the host trusts; they are part of the cache key.
LOCAL_CAS=/usr/local/share/ca-certificates
cas_hash=$( (find "$LOCAL_CAS" -type f -name '*.crt' -print0 2>/dev/null | sort -z | xargs -0r cat) | sha256sum | cut -c1-6)
BASE_REV=3  # bump when the base's recipe below changes
# The root filesystem's name: the recipe here, then what is in it (hack/debian-base.sh);
# BASE_TAR and BASE_IMAGE are set by resolve_base.
BASE_RECIPE="$SUITE-r$BASE_REV-$(printf '%s' "$BASE_PKGS" | sha256sum | cut -c1-6)-$cas_hash"
BASE_TAR="" BASE_IMAGE=""
# shellcheck source=hack/debian-base.sh
. "$here/debian-base.sh"
CTR_SOCK="$STATE/realnode/containerd/containerd.sock"
DOCKER="/usr/bin/docker"   # Debian's client, same API as its daemon
DOCKER_DIR="$STATE/docker"
export DOCKER_HOST="unix://$DOCKER_DIR/docker.sock" DOCKER_BUILDKIT=0

die() { echo "images: $*" >&2; exit 1; }
cleanup() { debian_remove_rootfs; stop_dockerd; }
trap cleanup EXIT
step() { printf '==> %s\n' "$*"; }
[ "$(id -u)" -eq 0 ] || die "run as root: debootstrap, dockerd and ctr need it"
for b in debootstrap dockerd ctr; do
  command -v "$b" >/dev/null || die "$b is missing: run hack/realnode-deps.sh"
done
[ -x "$DOCKER" ] || die "$DOCKER is missing: run hack/realnode-deps.sh (package docker.io)"

# make_rootfs <dir>: bookworm's minimal base with Python, made like python:3.11-slim.
make_rootfs() {
  local r=$1
  step "base root filesystem: debootstrap --variant=minbase $SUITE + $BASE_PKGS (~1 min)"
  debootstrap --variant=minbase --include="$BASE_PKGS" "$SUITE" "$r" "$MIRROR" \
    >"$CACHE/images/debootstrap.log" 2>&1 \
    || die "debootstrap failed; last lines of $CACHE/images/debootstrap.log:
$(tail -n 15 "$CACHE/images/debootstrap.log")"
}
# finish_rootfs <dir>: make it behave like python:3.11-slim: `python` and `pip` on PATH,
# and pip free to install into the image's own Python (the image is the environment;
# PEP 668's guard is for hosts; an upgrade of Python puts the guard back).
finish_rootfs() {
  local r=$1
  if compgen -G "$LOCAL_CAS/*.crt" >/dev/null; then
    cp -r "$LOCAL_CAS"/. "$r/usr/local/share/ca-certificates/"
    chroot "$r" update-ca-certificates >/dev/null 2>&1 || die "update-ca-certificates in the base failed"
  fi
  rm -f "$r"/usr/lib/python3*/EXTERNALLY-MANAGED
  ln -sf /usr/bin/python3 "$r/usr/local/bin/python"
  ln -sf /usr/bin/pip3 "$r/usr/local/bin/pip"
}
# resolve_base: this week's root filesystem (made, checked for updates, or as it was).
resolve_base() {
  [ -n "$BASE_TAR" ] && return
  # Named by the week before (hack/debian-base.sh says why no more): nothing uses them.
  rm -f "$CACHE"/images/rootfs-"$SUITE"-*-w[0-9][0-9].tar
  debian_base rootfs "$BASE_RECIPE" make_rootfs finish_rootfs
  BASE_TAR=$DEBIAN_BASE_TAR
  BASE_IMAGE="nightshift-base:$DEBIAN_BASE_ID"
}

dockerd_pid=""
start_dockerd() {
  mkdir -p "$DOCKER_DIR" "$CACHE/docker"
  if "$DOCKER" version >/dev/null 2>&1; then return; fi
  step "dockerd (data $CACHE/docker, no iptables, no bridge)"
  # --oom-score-adjust=0: root here may lack CAP_SYS_RESOURCE to lower its own score.
  dockerd --data-root "$CACHE/docker" --exec-root "$DOCKER_DIR/exec" \
    --pidfile "$DOCKER_DIR/dockerd.pid" -H "$DOCKER_HOST" \
    --iptables=false --ip-forward=false --ip-masq=false --bridge=none \
    --oom-score-adjust=0 >"$DOCKER_DIR/dockerd.log" 2>&1 &
  dockerd_pid=$!
  for _ in $(seq 1 150); do
    "$DOCKER" version >/dev/null 2>&1 && return
    kill -0 "$dockerd_pid" 2>/dev/null || die "dockerd exited; see $DOCKER_DIR/dockerd.log:
$(tail -n 15 "$DOCKER_DIR/dockerd.log")"
    sleep 0.2
  done
  die "dockerd did not answer in 30 s; see $DOCKER_DIR/dockerd.log"
}
stop_dockerd() {
  [ -n "$dockerd_pid" ] || return 0
  kill "$dockerd_pid" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$dockerd_pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$dockerd_pid" 2>/dev/null || true
  dockerd_pid=""
  # dockerd leaves its default network namespace mounted under its exec root.
  awk -v r="$DOCKER_DIR/" 'index($2, r) == 1 {print $2}' /proc/mounts | sort -r | while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" || true; done
}

load_base() {
  resolve_base
  "$DOCKER" image inspect "$BASE_IMAGE" >/dev/null 2>&1 && return
  step "docker import $BASE_IMAGE-rootfs, then a venv with a current pip (~30 s)"
  "$DOCKER" import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["python3"]' "$BASE_TAR" "$BASE_IMAGE-rootfs" >/dev/null
  # A venv first on PATH, like python:3.11-slim's own Python: `pip install` in a
  # Dockerfile installs there, away from Debian's python3-* packages. Debian's pip 23.0
  # backtracked ~6 min over boto3/botocore versions on the operator's requirements; a
  # current pip resolves them in about a minute.
  "$DOCKER" build --network host -t "$BASE_IMAGE" - >"$DOCKER_DIR/build-base.log" 2>&1 <<DOCKERFILE \
    || die "building $BASE_IMAGE failed; see $DOCKER_DIR/build-base.log"
FROM $BASE_IMAGE-rootfs
RUN python3 -m venv /opt/venv && /opt/venv/bin/pip install -q --no-cache-dir -U pip
ENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
DOCKERFILE
}

ctr_import() {
  [ -S "$CTR_SOCK" ] || die "the local cluster's real node is not running (no $CTR_SOCK):
start it with \`make cluster-up\` (real node on), then re-run \`make images\`"
  # containerd's garbage collector can drop a parent snapshot an import is about to use
  # (the tags just re-imported freed the old layers): "parent snapshot ... does not
  # exist". Seen once; a second import succeeds, so try up to three times.
  local try
  for try in 1 2 3; do
    if "$DOCKER" save "$@" | ctr --address "$CTR_SOCK" -n k8s.io images import - >/dev/null
    then return 0; fi
    echo "images: ctr import of $* failed (try $try of 3)" >&2
    sleep 2
  done
  die "ctr import of $* failed"
}

# image_name <dir>: the tag for the Dockerfile in <dir>.
image_name() {
  local rel=${1#"$root"/}
  case $rel in
    "$root"|.|"") echo "nightshift-operator:$TAG" ;;
    images/*) echo "nightshift-${rel#images/}:$TAG" ;;
    *) echo "nightshift-$(basename "$rel"):$TAG" ;;
  esac
}

build_one() {
  local dir; dir=$(cd "$1" && pwd)
  local name; name=$(image_name "$dir")
  step "docker build $name (${dir#"$root"/}/Dockerfile, BASE=$BASE_IMAGE)"
  # Build context: the repo root, so Dockerfiles can COPY the package.
  "$DOCKER" build --network host --build-arg "BASE=$BASE_IMAGE" -f "$dir/Dockerfile" \
    -t "$name" "$root" >"$DOCKER_DIR/build-${name%%:*}.log" 2>&1 \
    || die "docker build of $name failed; last lines of $DOCKER_DIR/build-${name%%:*}.log:
$(tail -n 25 "$DOCKER_DIR/build-${name%%:*}.log")"
  if in_node_already "$name"; then
    step "$name unchanged: the node has this build already"
    return 0
  fi
  built+=("$name")
}
# What this cluster's containerd last imported, per image: the docker image ID. Kept
# beside the root its config names (nodeconfig.imported_dir): the build cache's, shared
# by every checkout's node in turn, or the checkout's own when another node held that.
CTR_CONFIG="$STATE/realnode/containerd/config.toml"
ctr_root=$(sed -n 's/^root = "\(.*\)"$/\1/p' "$CTR_CONFIG" 2>/dev/null || true)
IMPORTED_DIR="${ctr_root:-$STATE/realnode/containerd/root}"
IMPORTED_DIR="$(dirname "$IMPORTED_DIR")/nightshift-imported"
image_id() { "$DOCKER" image inspect -f '{{.Id}}' "$1"; }
in_node_already() {
  local stamp; stamp="$IMPORTED_DIR/${1%%:*}.id"
  [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$(image_id "$1")" ] && [ -S "$CTR_SOCK" ] \
    && ctr --address "$CTR_SOCK" -n k8s.io images ls -q | grep -qx "docker.io/library/$1"
}
# One `docker save` of every image built, one import: their shared base layers are
# streamed once, not once per image (six imports took about 9 s each).
import_built() {
  [ ${#built[@]} -gt 0 ] || return 0
  step "ctr import ${built[*]}"
  ctr_import "${built[@]}"
  mkdir -p "$IMPORTED_DIR"
  local name
  for name in "${built[@]}"; do image_id "$name" >"$IMPORTED_DIR/${name%%:*}.id"; done
}
built=()

all_dirs() {
  echo "$root"
  find "$root/images" -mindepth 2 -maxdepth 2 -name Dockerfile -printf '%h\n' | sort
}

cmd=${1:-all}
case $cmd in
  rootfs) resolve_base; echo "$BASE_TAR" ;;
  base) start_dockerd; load_base; ctr_import "$BASE_IMAGE" ;;
  build) shift; [ $# -gt 0 ] || die "build needs a directory with a Dockerfile"
    start_dockerd; load_base; for d in "$@"; do build_one "$d"; done; import_built ;;
  all) start_dockerd; load_base
    while read -r d; do build_one "$d"; done < <(all_dirs); import_built ;;
  *) die "unknown command '$cmd' (all|rootfs|base|build DIR...)" ;;
esac
stop_dockerd

#!/usr/bin/env bash
# kind on this machine, every part made here (no registry pulls); docs/kind.md says how
# far it gets and why.
#   hack/kind.sh tools        kind (Go module proxy), kubeadm and CoreDNS (Go), into the cache
#   hack/kind.sh base         kind's base root filesystem from Debian packages (debootstrap)
#   hack/kind.sh node-image   dockerd started by hand; the node image assembled from the base,
#                             our Kubernetes binaries and images made from them
#   hack/kind.sh up           kind create cluster with that image; kubeconfig: $KIND_DIR/kubeconfig
#   hack/kind.sh load IMAGE.. copy images from the local cluster's real node into kind
#   hack/kind.sh down         kind delete cluster, then stop this script's dockerd
#   hack/kind.sh all          tools, base, node-image, up
# State lives in $NIGHTSHIFT_KIND_DIR (default ~/.cache/nightshift/kind): dockerd's data,
# socket and log, the kind config and kubeconfig. dockerd here is not the one of
# hack/images.sh (another data root) and runs without iptables or a default bridge.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
# shellcheck source=versions.env
. "$here/versions.env"
KIND_VERSION=${KIND_VERSION:-v0.30.0}     # its default node image is Kubernetes v1.34
COREDNS_VERSION=${COREDNS_VERSION:-v1.12.1}  # what kubeadm v1.34 deploys
CACHE=${NIGHTSHIFT_CACHE:-$HOME/.cache/nightshift}
KIND_DIR=${NIGHTSHIFT_KIND_DIR:-$CACHE/kind}
BIN=$CACHE/bin
KIND=$BIN/kind-$KIND_VERSION/kind
KUBEADM=$BIN/kubeadm-$KUBERNETES_VERSION/kubeadm
KUBEBIN=$BIN/kubernetes-$KUBERNETES_VERSION
KUBECTL=$BIN/kubectl-layer-$KUBECTL_LAYER_PACKAGE/kubectl
ETCD=$BIN/etcd-$ETCD_VERSION/etcd
COREDNS=$BIN/coredns-$COREDNS_VERSION/coredns
ETCD_TAG=${ETCD_VERSION#v}-nightshift
CLUSTER=${NIGHTSHIFT_KIND_CLUSTER:-nightshift}
SUITE=bookworm
MIRROR=${NIGHTSHIFT_DEBIAN_MIRROR:-http://deb.debian.org/debian}
# kind's base image (images/base/Dockerfile) with Debian's containerd, runc and CNI plugins
# in place of the ones it builds from GitHub sources.
BASE_PKGS=systemd,systemd-sysv,dbus,containerd,runc,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,bash,ca-certificates,curl,jq,procps,containernetworking-plugins,socat,ebtables
BASE_REV=2  # bump when the recipe below changes
# The base's name: the recipe here, then what is in it (hack/debian-base.sh); BASE_TAR,
# BASE_IMAGE and NODE_IMAGE are set by base.
BASE_RECIPE=$(printf '%s %s %s' "$BASE_PKGS" "$KIND_VERSION" "$BASE_REV" | sha256sum | cut -c1-10)
BASE_TAR="" BASE_IMAGE="" NODE_IMAGE=""
NODE_REV=2  # bump when the node recipe below changes
REALNODE_SOCK=${NIGHTSHIFT_LOCALCLUSTER_DIR:-$root/.localcluster}/realnode/containerd/containerd.sock
export GOFLAGS=-mod=mod GOTOOLCHAIN=${GOTOOLCHAIN:-auto} CGO_ENABLED=0
export PATH=$KIND_DIR/bin:$PATH:/usr/lib/go-1.23/bin
export DOCKER_HOST=unix://$KIND_DIR/docker.sock

die() { echo "kind.sh: $*" >&2; exit 1; }
step() { printf '==> %s\n' "$*"; }
need() { for b in "$@"; do command -v "$b" >/dev/null || die "$b is missing (hack/deps.sh, hack/realnode-deps.sh)"; done; }

# --- tools: Go builds --------------------------------------------------------------------

go_tool() {  # go_tool <name-version> <module requirement lines> <package> <output> [ldflags]
  local dir=$CACHE/src/$1 req=$2 pkg=$3 out=$4 ld=${5:--s -w}
  [ -x "$out" ] && return
  step "go build $pkg -> $out"
  mkdir -p "$dir"
  printf 'module nightshift.local/build\n\ngo 1.24\n\n%s\n\ntool %s\n' "$req" "$pkg" >"$dir/go.mod"
  (cd "$dir" && go mod tidy && go build -trimpath -ldflags "$ld" -o "$out" "$pkg") \
    || die "building $pkg failed (see above). Is the Go module proxy reachable?"
}

# One build at a time: `make test` builds the Go tools ahead (hack/integration.sh) and its
# kind e2e subset, started meanwhile, waits here until they are done. Held until exit.
build_lock() {
  mkdir -p "$CACHE"
  exec 9>>"$CACHE/kind-build.lock"
  flock 9
}

tools() {
  build_lock
  need go
  go_tool "kind-$KIND_VERSION" "require sigs.k8s.io/kind $KIND_VERSION" sigs.k8s.io/kind "$KIND"
  go_tool "coredns-$COREDNS_VERSION" "require github.com/coredns/coredns $COREDNS_VERSION" \
    github.com/coredns/coredns "$COREDNS"
  if [ ! -x "$KUBEADM" ]; then
    # kubeadm from the same module graph as the other Kubernetes binaries (build-upstream.sh).
    local k8s=$CACHE/src/kubernetes-$KUBERNETES_VERSION dir=$CACHE/src/kubeadm-$KUBERNETES_VERSION
    [ -f "$k8s/go.mod" ] || die "no $k8s/go.mod: run \`make upstream\` first"
    step "go build k8s.io/kubernetes/cmd/kubeadm $KUBERNETES_VERSION"
    mkdir -p "$dir" && cp "$k8s/go.mod" "$k8s/go.sum" "$dir/"
    grep -q 'cmd/kubeadm' "$dir/go.mod" || echo "tool k8s.io/kubernetes/cmd/kubeadm" >>"$dir/go.mod"
    local v=$KUBERNETES_VERSION minor=${KUBERNETES_VERSION#v1.}; minor=${minor%%.*}
    (cd "$dir" && go build -trimpath -o "$KUBEADM" -ldflags "-s -w \
      -X k8s.io/component-base/version.gitVersion=$v -X k8s.io/component-base/version.gitMajor=1 \
      -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean" \
      k8s.io/kubernetes/cmd/kubeadm) || die "building kubeadm failed (see above)"
  fi
  for f in "$KUBEBIN/kubelet" "$KUBEBIN/kube-apiserver" "$KUBECTL" "$ETCD"; do
    [ -x "$f" ] || die "$f is missing: run \`make upstream\` first"
  done
}

# --- base: kind's base image from Debian packages ---------------------------------------

# shellcheck source=hack/debian-base.sh
. "$here/debian-base.sh"

kind_source() {
  local src; src=$(go env GOMODCACHE)/sigs.k8s.io/kind@$KIND_VERSION
  [ -d "$src/images/base/files" ] || (cd "$CACHE/src/kind-$KIND_VERSION" && go mod download sigs.k8s.io/kind) >/dev/null
  [ -d "$src/images/base/files" ] || die "kind's sources ($src) lack images/base/files"
  echo "$src"
}

make_base() {
  local r=$1
  step "kind base root filesystem: debootstrap $SUITE + Debian's containerd, runc, CNI plugins (~3 min)"
  debootstrap --variant=minbase --include="$BASE_PKGS" "$SUITE" "$r" "$MIRROR" \
    >"$CACHE/images/kind-debootstrap.log" 2>&1 \
    || die "debootstrap failed; last lines of $CACHE/images/kind-debootstrap.log:
$(tail -n 15 "$CACHE/images/kind-debootstrap.log")"
}

# finish_base <dir>: kind's recipe on Debian's packages; again after an upgrade, which can
# put back a unit link or a file removed here.
finish_base() {
  local r=$1 files; files=$(kind_source)/images/base/files
  # kind's own files: entrypoint, systemd units, containerd config, kubelet drop-ins.
  cp -r "$files"/. "$r/"
  chmod 0755 "$r"/usr/local/bin/* "$r"/kind/bin/*
  # kind's units start /usr/local/bin/containerd; Debian installs /usr/bin/containerd.
  for b in containerd ctr containerd-shim-runc-v2; do ln -sf "/usr/bin/$b" "$r/usr/local/bin/$b"; done
  mkdir -p "$r/opt/cni/bin" "$r/etc/kubernetes/manifests" "$r/etc/cni/net.d"
  for p in host-local loopback ptp portmap bridge; do ln -sf "/usr/lib/cni/$p" "$r/opt/cni/bin/$p"; done
  chroot "$r" sh -c 'ctr oci spec | jq ".hooks.createContainer[.hooks.createContainer|length] |= . + {\"path\": \"/kind/bin/mount-product-files.sh\"}" | jq "del(.process.rlimits)" > /etc/containerd/cri-base.json' \
    || die "writing /etc/containerd/cri-base.json failed"
  # The sandbox image is the local cluster's pause image (localcluster/pause.py).
  sed -i 's#sandbox_image = .*#sandbox_image = "localhost/nightshift-pause:1"#' "$r/etc/containerd/config.toml"
  find "$r/lib/systemd/system/sysinit.target.wants/" -name systemd-tmpfiles-setup.service -delete
  rm -f "$r"/lib/systemd/system/multi-user.target.wants/* "$r"/etc/systemd/system/*.wants/* \
    "$r"/lib/systemd/system/local-fs.target.wants/* "$r"/lib/systemd/system/sockets.target.wants/*udev* \
    "$r"/lib/systemd/system/sockets.target.wants/*initctl* "$r"/lib/systemd/system/basic.target.wants/*
  grep -qx "ReadKMsg=no" "$r/etc/systemd/journald.conf" || echo "ReadKMsg=no" >>"$r/etc/systemd/journald.conf"
  chroot "$r" systemctl enable kubelet.service containerd.service undo-mount-hacks.service >/dev/null 2>&1 \
    || die "systemctl enable in the base failed"
  chroot "$r" systemctl mask systemd-binfmt.service >/dev/null 2>&1 || true
}

# base: this week's root filesystem (made, checked for Debian's updates, or as it was),
# and the names of the images made from it.
base() {
  [ -n "$BASE_TAR" ] && return
  need debootstrap chroot go
  [ "$(id -u)" -eq 0 ] || die "run as root: debootstrap needs it"
  trap debian_remove_rootfs EXIT
  # Named by the week before (hack/debian-base.sh says why no more): nothing uses them.
  rm -f "$CACHE/images/kind-base-$SUITE"-??????????.tar
  debian_base "kind-base-$SUITE" "$BASE_RECIPE" make_base finish_base
  trap - EXIT
  BASE_TAR=$DEBIAN_BASE_TAR
  BASE_IMAGE=nightshift/kind-base:$DEBIAN_BASE_ID
  NODE_IMAGE=nightshift/kind-node:$KUBERNETES_VERSION-$DEBIAN_BASE_ID-n$NODE_REV
}

# --- dockerd, by hand ----------------------------------------------------------------------

docker_up() { docker version >/dev/null 2>&1; }

start_dockerd() {
  need dockerd /usr/bin/docker
  mkdir -p "$KIND_DIR/bin" "$KIND_DIR/data" "$KIND_DIR/exec"
  # kind calls `docker`: Debian's client, the same API as Debian's dockerd.
  ln -sf /usr/bin/docker "$KIND_DIR/bin/docker"
  docker_up && return
  need jq
  # Root here lacks CAP_SYS_RESOURCE in its bounding set, and Docker 20.10 gives
  # --privileged containers (kind's nodes) and their execs every capability, which runc
  # cannot apply ("unable to apply caps: operation not permitted"): this runtime drops
  # that one capability from the spec, then runs Debian's runc.
  cat >"$KIND_DIR/bin/runc-nosysresource" <<'SH'
#!/bin/sh
prev=""
for a in "$@"; do
  case $prev in
    --bundle|-b) f="$a/config.json"; filter='.process.capabilities' ;;
    --process|-p) f="$a"; filter='.capabilities' ;;
    *) f="" ;;
  esac
  if [ -n "$f" ] && [ -f "$f" ]; then
    jq "($filter // {}) |= with_entries(.value |= map(select(. != \"CAP_SYS_RESOURCE\")))" \
      "$f" >"$f.nightshift" && mv "$f.nightshift" "$f"
  fi
  prev=$a
done
exec /usr/sbin/runc "$@"
SH
  chmod +x "$KIND_DIR/bin/runc-nosysresource"
  step "dockerd (data $KIND_DIR/data, no iptables, no default bridge, runtime runc-nosysresource)"
  setsid dockerd --data-root "$KIND_DIR/data" --exec-root "$KIND_DIR/exec" \
    --pidfile "$KIND_DIR/dockerd.pid" -H "$DOCKER_HOST" \
    --iptables=false --ip-forward=false --ip-masq=false --bridge=none \
    --add-runtime "nightshift=$KIND_DIR/bin/runc-nosysresource" --default-runtime nightshift \
    --oom-score-adjust=0 >"$KIND_DIR/dockerd.log" 2>&1 </dev/null 9>&- &  # without the build lock
  for _ in $(seq 1 150); do
    docker_up && return
    sleep 0.2
  done
  die "dockerd did not answer in 30 s; see $KIND_DIR/dockerd.log:
$(tail -n 15 "$KIND_DIR/dockerd.log")"
}

stop_dockerd() {
  [ -s "$KIND_DIR/dockerd.pid" ] || return 0
  local pid; pid=$(cat "$KIND_DIR/dockerd.pid")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$KIND_DIR/dockerd.pid"
  awk -v r="$KIND_DIR/exec/" 'index($2, r) == 1 {print $2}' /proc/mounts | sort -r | while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" || true; done
}

# --- node image ------------------------------------------------------------------------------

# binary_image <image> <binary> [entrypoint]: a one-binary image (statically linked).
binary_image() {
  local image=$1 binary=$2 entry=${3:-} tmp
  docker image inspect "$image" >/dev/null 2>&1 && return
  tmp=$(mktemp -d)
  mkdir -p "$tmp/usr/local/bin" "$tmp/tmp" "$tmp/etc"
  cp "$binary" "$tmp/usr/local/bin/"
  echo "root:x:0:0:root:/:/usr/local/bin/none" >"$tmp/etc/passwd"
  local changes=(--change 'ENV PATH=/usr/local/bin:/usr/bin:/bin')
  [ -n "$entry" ] && changes+=(--change "ENTRYPOINT [\"$entry\"]")
  tar -C "$tmp" -c . | docker import "${changes[@]}" - "$image" >/dev/null
  rm -rf "$tmp"
}

node_image() {
  build_lock
  tools
  base
  start_dockerd
  docker image inspect "$NODE_IMAGE" >/dev/null 2>&1 && { echo "$NODE_IMAGE"; return; }
  local pause
  # shellcheck disable=SC2012  # our own pause-<tag>.tar names; ls -t gives the newest
  pause=$(ls -t "$CACHE"/images/pause-*.tar 2>/dev/null | head -n1)
  [ -n "$pause" ] || die "no pause image in $CACHE/images: start the local cluster once (make cluster-up)"
  step "docker import $BASE_IMAGE"
  docker image inspect "$BASE_IMAGE" >/dev/null 2>&1 || docker import \
    --change 'ENV container=docker' \
    --change 'ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]' "$BASE_TAR" "$BASE_IMAGE" >/dev/null
  step "component images from our binaries"
  local v=$KUBERNETES_VERSION images=()
  for c in kube-apiserver kube-controller-manager kube-scheduler; do
    binary_image "registry.k8s.io/$c:$v" "$KUBEBIN/$c"; images+=("registry.k8s.io/$c:$v")
  done
  binary_image "registry.k8s.io/etcd:$ETCD_TAG" "$ETCD"; images+=("registry.k8s.io/etcd:$ETCD_TAG")
  binary_image "registry.k8s.io/coredns/coredns:$COREDNS_VERSION" "$COREDNS" /usr/local/bin/coredns
  images+=("registry.k8s.io/coredns/coredns:$COREDNS_VERSION")
  if ! docker image inspect "registry.k8s.io/kube-proxy:$v" >/dev/null 2>&1; then
    # kube-proxy needs iptables: the base (Debian's iptables) plus the binary.
    local p; p=$(docker create "$BASE_IMAGE")
    docker cp "$KUBEBIN/kube-proxy" "$p:/usr/local/bin/kube-proxy"
    docker commit --change 'ENTRYPOINT []' --change 'CMD []' "$p" "registry.k8s.io/kube-proxy:$v" >/dev/null
    docker rm -f "$p" >/dev/null
  fi
  images+=("registry.k8s.io/kube-proxy:$v")
  step "assembling $NODE_IMAGE (as kind build node-image does: run, copy, import, commit)"
  local id; id=$(docker run -d --entrypoint=sleep --security-opt seccomp=unconfined "$BASE_IMAGE" infinity)
  # shellcheck disable=SC2064  # $id expanded now: the trap runs after this function returns
  trap "docker rm -f $id >/dev/null 2>&1 || true" EXIT
  for b in "$KUBEADM" "$KUBEBIN/kubelet" "$KUBECTL"; do
    docker cp "$b" "$id:/usr/bin/$(basename "$b")"
  done
  docker exec "$id" sh -c "echo $v > /kind/version"
  # The node container runs without CAP_SYS_RESOURCE (this VM's bounding set lacks it,
  # see runc-nosysresource), and lowering a process's oom_score_adj needs it: runc's
  # init died on the critical pods' oomScoreAdj -997/-998 ("can't get final child's PID
  # from pipe: EOF") and no control-plane pod started. A runc ahead of Debian's on
  # containerd's PATH clamps a negative oomScoreAdj to 0 before create; nothing else
  # changes.
  docker exec -i "$id" sh -c 'cat > /usr/local/sbin/runc && chmod 755 /usr/local/sbin/runc' <<'SH'
#!/bin/sh
# Nightshift's kind node: clamp a negative oomScoreAdj (needs CAP_SYS_RESOURCE) to 0.
bundle=.
prev=
for a in "$@"; do
  [ "$prev" = --bundle ] || [ "$prev" = -b ] && bundle=$a
  prev=$a
done
case " $* " in
  *" create "*|*" run "*)
    if [ -f "$bundle/config.json" ]; then
      jq -c '(.process.oomScoreAdj // 0) as $o | if $o < 0 then .process.oomScoreAdj = 0 else . end' \
        "$bundle/config.json" > "$bundle/config.json.ns" && mv "$bundle/config.json.ns" "$bundle/config.json"
    fi ;;
esac
exec /usr/sbin/runc "$@"
SH
  # One node, one bridge: the CNI kind's kindnetd would set up, without its image.
  docker exec -i "$id" sh -c 'cat > /etc/cni/net.d/10-nightshift-bridge.conflist' <<'JSON'
{"cniVersion": "1.0.0", "name": "nightshift", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.0.0/24"}]],
            "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
JSON
  docker exec "$id" bash -c 'nohup containerd >/tmp/containerd.log 2>&1 &
    for i in $(seq 1 50); do [ -S /run/containerd/containerd.sock ] && break; sleep 0.2; done; ctr version >/dev/null' \
    || die "containerd did not start in the build container"
  local import=(ctr --namespace=k8s.io images import --label=io.cri-containerd.pinned=pinned --no-unpack --digests -)
  docker exec -i "$id" "${import[@]}" <"$pause" >/dev/null || die "importing the pause image failed"
  for image in "${images[@]}"; do
    docker save "$image" | docker exec -i "$id" "${import[@]}" >/dev/null || die "importing $image failed"
  done
  docker exec "$id" ctr --namespace=k8s.io images list -q
  docker exec "$id" pkill containerd || true
  docker commit --change 'ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]' \
    --change 'ENV HTTP_PROXY="" HTTPS_PROXY="" NO_PROXY=""' "$id" "$NODE_IMAGE" >/dev/null
  docker rm -f "$id" >/dev/null; trap - EXIT
  echo "$NODE_IMAGE"
}

# --- cluster ---------------------------------------------------------------------------------

up() {
  node_image >/dev/null
  # kind bind-mounts /lib/modules read-only; this VM's kernel has its modules built in.
  [ -d /lib/modules ] || mkdir -p /lib/modules
  cat >"$KIND_DIR/config.yaml" <<YAML
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
networking:
  disableDefaultCNI: true   # the node image's bridge conflist instead of kindnetd
nodes:
- role: control-plane
kubeadmConfigPatches:
- |
  kind: ClusterConfiguration
  etcd:
    local:
      imageRepository: registry.k8s.io
      imageTag: $ETCD_TAG
YAML
  if "$KIND" get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
    step "kind cluster $CLUSTER exists"
  else
    step "kind create cluster --name $CLUSTER --image $NODE_IMAGE"
    "$KIND" create cluster --name "$CLUSTER" --image "$NODE_IMAGE" --config "$KIND_DIR/config.yaml" \
      --kubeconfig "$KIND_DIR/kubeconfig" --retain --wait 3m -v 1 2>&1 | tee "$KIND_DIR/create.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || die "kind create cluster failed; see $KIND_DIR/create.log and \`$0 logs\`"
  fi
  echo "KUBECONFIG=$KIND_DIR/kubeconfig"
}

load() {
  [ -S "$REALNODE_SOCK" ] || die "images come from the local cluster's real node (make images); it is not running"
  # One archive for all: layers the images share (their base and Python) travel and
  # unpack once (operator and runner: 648 MB together, 880 MB one by one).
  step "load $*"
  ctr --address "$REALNODE_SOCK" -n k8s.io images export - "$@" \
    | docker exec -i "$CLUSTER-control-plane" ctr -n k8s.io images import --digests - >/dev/null \
    || die "loading $* failed"
}

logs() { "$KIND" export logs "$KIND_DIR/logs" --name "$CLUSTER"; echo "$KIND_DIR/logs"; }

down() {
  if docker_up && [ -x "$KIND" ]; then "$KIND" delete cluster --name "$CLUSTER" --kubeconfig "$KIND_DIR/kubeconfig" || true; fi
  stop_dockerd
}

cmd=${1:-all}; shift || true
case $cmd in
  tools) tools ;;
  base) base; echo "$BASE_TAR" ;;
  node-image) node_image ;;
  up) up ;;
  load) start_dockerd; load "$@" ;;
  logs) start_dockerd; logs ;;
  down) down ;;
  all) up ;;
  *) die "unknown command '$cmd' (tools|base|node-image|up|load IMAGE...|logs|down|all)" ;;
esac

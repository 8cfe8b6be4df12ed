#!/usr/bin/env bash
# Installs the Debian packages the local cluster's real worker node and `make images`
# need: containerd, runc, the CNI plugins, iptables (kube-proxy and the CNI portmap),
# debootstrap (the base root filesystem), docker.io (its daemon, run by hand, builds
# Dockerfiles), gcc (the static pause program). Opt-in: `make deps` does not run it;
# `nightshift-localcluster up` and `make images` do when a real node is wanted.
# Installing never starts a service: our processes are started and stopped by PID.
set -euo pipefail
pkgs=(containerd runc containernetworking-plugins iptables debootstrap docker.io gcc libc6-dev)
need=()
for pkg in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
[ ${#need[@]} -eq 0 ] && exit 0
command -v apt-get >/dev/null || { echo "realnode-deps: missing ${need[*]} and no apt-get: install them by hand" >&2; exit 1; }
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
# Keep package scripts from starting containerd/dockerd as services: exit 101 means
# "action forbidden" to invoke-rc.d. Only a policy file we created is removed.
policy=/usr/sbin/policy-rc.d
made_policy=""
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null && $SUDO chmod 755 "$policy" && made_policy=1
fi
cleanup() { [ -z "$made_policy" ] || $SUDO rm -f "$policy"; }
trap cleanup EXIT
echo "==> apt-get install ${need[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null

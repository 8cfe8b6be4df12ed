#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks for `make test` / `make demo`:
# Debian packages, and Go (from bookworm-backports when the machine has none or an old
# one; Go then fetches the exact toolchain the upstream modules ask for from the Go
# module proxy, GOTOOLCHAIN=auto). Idempotent: a warm machine installs nothing.
set -euo pipefail
need=()
for pkg in openssl git ca-certificates python3-venv python3-pip shellcheck; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
apt_updated=""
apt_install() {
  [ -n "$apt_updated" ] || { $SUDO apt-get update -qq; apt_updated=1; }
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
if [ ${#need[@]} -gt 0 ]; then
  command -v apt-get >/dev/null || { echo "deps: missing ${need[*]} and no apt-get: install them by hand" >&2; exit 1; }
  echo "==> apt-get install ${need[*]}"
  apt_install "${need[@]}"
fi

go_ok() {
  # Go >= 1.21 understands GOTOOLCHAIN and can fetch the newer toolchain it needs.
  local v; v=$("$1" env GOVERSION 2>/dev/null) || return 1
  v=${v#go}; local major=${v%%.*} rest=${v#*.}; local minor=${rest%%.*}
  [ "$major" -gt 1 ] || [ "$minor" -ge 21 ]
}
if command -v go >/dev/null && go_ok go; then exit 0; fi
if [ -x /usr/lib/go-1.23/bin/go ]; then exit 0; fi
command -v apt-get >/dev/null || { echo "deps: Go >= 1.21 is needed: install it from go.dev" >&2; exit 1; }
echo "==> Go >= 1.21 from bookworm-backports (golang-1.23)"
list=/etc/apt/sources.list.d/nightshift-backports.list
[ -f "$list" ] || echo 'deb http://deb.debian.org/debian bookworm-backports main' | $SUDO tee "$list" >/dev/null
apt_updated=""
apt_install -t bookworm-backports golang-1.23-go || {
  echo "deps: could not install golang-1.23 from bookworm-backports; install Go >= 1.21 and put it on PATH" >&2; exit 1; }

# shellcheck shell=bash
# Sourced by hack/images.sh and hack/kind.sh: a Debian root filesystem, cached as a tar
# named by what is in it, with Debian's security and stable updates applied.
#
#   debian_base <prefix> <recipe key> <make function> <finish function>
#     sets DEBIAN_BASE_TAR ($CACHE/images/<prefix>-<recipe>-<content>.tar) and
#     DEBIAN_BASE_ID (<recipe>-<content>). <make function> <rootfs dir> debootstraps
#     the root filesystem; <finish function> <rootfs dir> applies the caller's recipe,
#     and runs again after every upgrade that changed a package (an upgrade can put back
#     a file the recipe removed), so it must be idempotent.
#
# Why content, not date: a tar named by the week made every image built on it new each
# week, and every image on top rebuilt (about 5 minutes of the week's first `make test`),
# whether or not Debian had changed a package in it. Now the newest tar is checked once
# per ISO week: unpacked, `apt-get upgrade` from bookworm, bookworm-updates and
# bookworm-security, and named by the sorted list of its package versions. The same list
# is the same name, so the images on it stay cached; a new version (a security fix) is a
# new name, and everything on it is rebuilt. Without the mirror, the last tar is used
# and the check is tried again on the next run.
#
# Needs: CACHE, SUITE, MIRROR, step and die from the caller; root (chroot, mount).

SECURITY_MIRROR=${NIGHTSHIFT_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}

# The sources a built image keeps, so a Dockerfile's own `apt-get install` gets the same
# updates.
debian_sources() {
  printf 'deb %s %s main\ndeb %s %s-updates main\ndeb %s %s-security main\n' \
    "$MIRROR" "$SUITE" "$MIRROR" "$SUITE" "$SECURITY_MIRROR" "$SUITE"
}

debian_rootfs=""
debian_remove_rootfs() {
  [ -n "$debian_rootfs" ] || return 0
  awk -v r="$debian_rootfs/" 'index($2, r) == 1 {print $2}' /proc/mounts | sort -r | while read -r m; do
    umount -l "$m" || true; done
  rm -rf "$debian_rootfs"; debian_rootfs=""
}

# The content part of the name: every package and its version.
debian_content() {
  # shellcheck disable=SC2016  # dpkg-query's format, not the shell's
  chroot "$1" dpkg-query -W -f '${Package}=${Version}\n' | LC_ALL=C sort | sha256sum | cut -c1-10
}

# apt-get upgrade inside <rootfs>; fails (leaving the rootfs unchanged or partly fetched)
# when the mirror does not answer. No service starts in a chroot (policy-rc.d), and
# changed config files keep the recipe's version (--force-confold).
debian_upgrade() {
  local r=$1 log=$2
  debian_sources >"$r/etc/apt/sources.list"
  rm -f "$r"/etc/apt/sources.list.d/*.list "$r"/etc/apt/sources.list.d/*.sources
  cp /etc/resolv.conf "$r/etc/resolv.conf"
  printf '#!/bin/sh\nexit 101\n' >"$r/usr/sbin/policy-rc.d"; chmod 0755 "$r/usr/sbin/policy-rc.d"
  mountpoint -q "$r/proc" || mount -t proc proc "$r/proc"
  local rc=0
  { chroot "$r" apt-get -q --error-on=any update \
      && chroot "$r" env DEBIAN_FRONTEND=noninteractive apt-get -q -y \
           -o Dpkg::Options::=--force-confold -o Dpkg::Options::=--force-confdef upgrade
  } >"$log" 2>&1 || rc=$?
  umount "$r/proc" 2>/dev/null || umount -l "$r/proc" || true
  rm -f "$r/usr/sbin/policy-rc.d"
  rm -rf "$r"/var/lib/apt/lists/* "$r"/var/cache/apt/*.bin "$r"/var/cache/apt/archives/*.deb
  : >"$r/etc/resolv.conf"
  return "$rc"
}

debian_base() {
  local prefix=$1 recipe=$2 make=$3 finish=$4
  local dir=$CACHE/images week; week=$(date +%G-w%V)
  local stamp=$dir/$prefix-$recipe.checked-$week last="" before after
  mkdir -p "$dir"
  if [ -s "$stamp" ] && [ -s "$dir/$prefix-$recipe-$(cat "$stamp").tar" ]; then
    debian_set "$dir" "$prefix" "$recipe" "$(cat "$stamp")"; return
  fi
  # shellcheck disable=SC2012  # our own <prefix>-<recipe>-<content>.tar names; -t: newest
  last=$(ls -t "$dir/$prefix-$recipe"-*.tar 2>/dev/null | head -n1 || true)
  debian_rootfs=$(mktemp -d "$dir/$prefix-rootfs.XXXXXX")
  if [ -n "$last" ]; then
    before=${last##*-}; before=${before%.tar}
    step "$prefix: this week's check of ${last##*/} for Debian updates (bookworm, -updates, -security)"
    tar -C "$debian_rootfs" --numeric-owner --xattrs -xpf "$last"
    if ! debian_upgrade "$debian_rootfs" "$dir/$prefix-upgrade.log"; then
      echo "warning: $prefix: the Debian mirror did not answer ($dir/$prefix-upgrade.log);" \
        "using ${last##*/} as it is and checking again next run" >&2
      debian_remove_rootfs; debian_set "$dir" "$prefix" "$recipe" "$before"; return
    fi
  else
    "$make" "$debian_rootfs"
    before=""
    debian_upgrade "$debian_rootfs" "$dir/$prefix-upgrade.log" \
      || die "apt-get upgrade in the new $prefix root filesystem failed; last lines of $dir/$prefix-upgrade.log:
$(tail -n 15 "$dir/$prefix-upgrade.log")"
  fi
  after=$(debian_content "$debian_rootfs")
  if [ "$after" = "$before" ]; then
    step "$prefix: no package changed; ${last##*/} stays"
  else
    [ -n "$before" ] && step "$prefix: $(grep -c '^Unpacking ' "$dir/$prefix-upgrade.log" || true) packages updated"
    "$finish" "$debian_rootfs"
    tar -C "$debian_rootfs" --numeric-owner --xattrs -cf "$dir/$prefix-$recipe-$after.tar.tmp" . \
      && mv "$dir/$prefix-$recipe-$after.tar.tmp" "$dir/$prefix-$recipe-$after.tar"
    # The tar before serves no build any more: the images made on it stay in Docker's cache.
    [ -n "$last" ] && [ "$last" != "$dir/$prefix-$recipe-$after.tar" ] && rm -f "$last"
  fi
  debian_remove_rootfs
  rm -f "$dir/$prefix-$recipe".checked-*
  echo "$after" >"$stamp"
  debian_set "$dir" "$prefix" "$recipe" "$after"
}

debian_set() {
  DEBIAN_BASE_TAR=$1/$2-$3-$4.tar
  DEBIAN_BASE_ID=$3-$4
  export DEBIAN_BASE_TAR DEBIAN_BASE_ID
}

#!/usr/bin/env bash
# CI / set-up provisioning: Apptainer on Debian 12, which does not package it.
# (At a real site Apptainer is installed; nothing in the product calls this.)
#
#   scripts/provision-apptainer.sh        -> installs /usr/local/bin/apptainer
#
# Debian sid's apptainer needs glibc >= 2.38, so it lives in a sid root
# filesystem (ROOT); the `apptainer` wrapper enters ROOT in a private mount
# namespace with pivot_root (apptainer refuses a plain chroot), with /proc,
# /dev, /sys and the host directories builds and runs need bind-mounted at the
# same paths. The rootfs is cached as a tarball under the cache dir, keyed by
# its inputs (the build_rootfs function below, the mirror): provisioning a
# fresh machine with a warm cache takes seconds. The steps follow
# ../shared/ENVIRONMENT.md ("Container runtimes").
set -euo pipefail
[[ $(id -u) -eq 0 ]] || { echo "provision-apptainer: run as root" >&2; exit 2; }

cache=${FABRIC_BENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fabric-bench}
home=${FABRIC_BENCH_APPTAINER_HOME:-/var/lib/fabric-bench/apptainer}
wrapper=${FABRIC_BENCH_APPTAINER_WRAPPER:-/usr/local/bin/apptainer}
# Host directories visible inside at the same paths (those that exist), plus
# the current directory and $FABRIC_BENCH_APPTAINER_DIRS (colon-separated) at
# each call. One per line: paths may contain spaces.
host_dirs=(/tmp /dev/shm /work /root /home /opt /var/tmp /srv "$cache")

# The Debian mirror configured on this host (never a hard-coded host name).
mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
[[ -n $mirror ]] || mirror=$(awk '/^deb / {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
[[ -n $mirror ]] || { echo "provision-apptainer: no Debian mirror in /etc/apt" >&2; exit 2; }

squashfs_tools=1:4.5.1-1  # the host's (Debian 12) release; see build_rootfs

build_rootfs() {  # ROOT MIRROR LOG
  local root=$1 mirror=$2 log=$3
  local packages=(apptainer squashfs-tools squashfuse fuse2fs e2fsprogs ca-certificates)
  debootstrap --variant=minbase sid "$root" "$mirror" >"$log" 2>&1
  mount -t proc proc "$root/proc"
  chroot "$root" apt-get -qq -o Acquire::Check-Valid-Until=false update >>"$log" 2>&1 &&
    chroot "$root" env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -qq --no-install-recommends "${packages[@]}" >>"$log" 2>&1 &&
    chroot "$root" apt-get clean || { umount "$root/proc"; return 1; }
  # mksquashfs (which packs every SIF): bookworm's 4.5.1 in place of sid's 4.7.5, which is
  # reported to segfault now and then while packing (apptainer/apptainer#3577, whose workaround
  # is 4.5.1); twice in CI here a fabric layer's build died while packing its SIF (exit 255)
  (cd "$root/tmp" && apt-get download -qq "squashfs-tools=$squashfs_tools" &&
     mv squashfs-tools_*.deb squashfs-tools.deb) >>"$log" 2>&1 &&
    chroot "$root" dpkg -i /tmp/squashfs-tools.deb >>"$log" 2>&1 &&
    chroot "$root" apt-mark hold squashfs-tools >>"$log" 2>&1 || { umount "$root/proc"; return 1; }
  rm -f "$root/tmp/squashfs-tools.deb"
  umount "$root/proc"
  # Device nodes of a debootstrap rootfs get in apptainer's way; /dev is bound at entry.
  find "$root/dev" -mindepth 1 -delete
  printf '127.0.0.1 localhost\n::1 localhost\n' > "$root/etc/hosts"
  # No CAP_SYS_RESOURCE on this kernel: root takes its capabilities from the
  # capability file; fakeroot (needed for %post) needs a subordinate id range.
  sed -i 's/^root default capabilities = .*/root default capabilities = file/' \
    "$root/etc/apptainer/apptainer.conf"
  echo "root:100000:65536" > "$root/etc/subuid"
  echo "root:100000:65536" > "$root/etc/subgid"
}

key=$( { declare -f build_rootfs; echo "$mirror $squashfs_tools"; } | sha256sum | cut -c1-16)
root="$home/$key/rootfs"
tarball="$cache/apptainer-rootfs-$key.tar.gz"

if [[ ! -x $root/usr/bin/apptainer ]]; then
  mkdir -p "$cache" "$home"
  work="$home/$key.tmp"
  rm -rf "$work" && mkdir -p "$work/rootfs"
  if [[ -f $tarball ]]; then
    echo "provision-apptainer: unpacking cached rootfs $tarball"
    tar -C "$work/rootfs" -xzf "$tarball"
  else
    echo "provision-apptainer: debootstrap sid + apt-get install apptainer (~3 min)"
    build_rootfs "$work/rootfs" "$mirror" "$work/build.log" ||
      { echo "provision-apptainer: building the sid rootfs failed, log: $work/build.log" >&2; exit 1; }
    tar -C "$work/rootfs" -czf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
  fi
  mkdir -p "$home/$key"
  rm -rf "$root" && mv "$work/rootfs" "$root" && rm -rf "$work"
fi

# The entry: private mount namespace, host dirs at the same paths, pivot_root.
enter="$home/$key/enter"
cat > "$enter" <<EOF
#!/bin/sh
# Runs in a private mount namespace (started by $wrapper).
set -e
root='$root'
host_dirs='$home/$key/host-dirs'
cwd=\$(pwd)
mount --bind "\$root" "\$root"
mount -t proc proc "\$root/proc"
mount --rbind /dev "\$root/dev"
mount --rbind /sys "\$root/sys"
# name resolution as on the host (apptainer passes these on to containers)
for file in /etc/hosts /etc/resolv.conf; do
  [ -f "\$file" ] && touch "\$root\$file" && mount --bind "\$file" "\$root\$file"
done
{ cat "\$host_dirs"; printf '%s\n' "\${FABRIC_BENCH_APPTAINER_DIRS:-}" | tr ':' '\n'; printf '%s\n' "\$cwd"; } |
while IFS= read -r dir; do
  [ -n "\$dir" ] && [ -d "\$dir" ] || continue
  mkdir -p "\$root\$dir"
  mount --rbind "\$dir" "\$root\$dir"
done
mkdir -p "\$root/.oldroot"
cd "\$root"
pivot_root . .oldroot
umount -l /.oldroot
cd "\$cwd" 2>/dev/null || cd /
exec /usr/bin/apptainer "\$@"
EOF
chmod 755 "$enter"
printf '%s\n' "${host_dirs[@]}" > "$home/$key/host-dirs"
mkdir -p "$(dirname "$wrapper")"
cat > "$wrapper" <<EOF
#!/bin/sh
# apptainer from a Debian sid rootfs, installed by fabric-bench's
# scripts/provision-apptainer.sh. Host dirs visible inside at the same paths:
# ${host_dirs[*]}, the current directory and \$FABRIC_BENCH_APPTAINER_DIRS.
exec unshare --mount --propagation private -- "$enter" "\$@"
EOF
chmod 755 "$wrapper"

# Every capability in this kernel's bounding set (it lacks CAP_SYS_RESOURCE).
if ! grep -q CAP_ "$root/etc/apptainer/capability.json" 2>/dev/null; then
  caps=$(capsh --decode="$(awk '/^CapBnd/ {print $2}' /proc/self/status)" | cut -d= -f2 | tr '[:lower:]' '[:upper:]')
  "$wrapper" capability add --user root "$caps" >/dev/null 2>&1
fi
squashfs=$(chroot "$root" mksquashfs -version 2>/dev/null | head -n 1 || true)
echo "provision-apptainer: ready: $("$wrapper" --version), ${squashfs:-no mksquashfs} ($wrapper -> $root)"

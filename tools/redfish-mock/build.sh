#!/usr/bin/env bash
# Builds the independent Redfish emulator the redfish driver is tested against: the `bmc/mock` package of
# github.com/ironcore-dev/metal-operator (Apache-2.0; it serves DMTF's public mockup with one ComputerSystem),
# at an exact version from the Go module proxy (the proxy refuses the module's version list, so @latest fails).
# Nothing prebuilt is downloaded.
#
# Output: $STOCKADE_CACHE/bin/redfish-mock-v<version>/redfish-mock — keyed by version, so a warm run is a stat().
# Usage: tools/redfish-mock/build.sh [--print]    (--print: the binary's path, builds nothing)
set -euo pipefail
VERSION=0.7.0
CACHE="${STOCKADE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/stockade}"
OUT="$CACHE/bin/redfish-mock-v$VERSION/redfish-mock"
[ "${1:-}" = --print ] && { echo "$OUT"; exit 0; }
[ -x "$OUT" ] && exit 0
command -v go >/dev/null || [ ! -x /usr/local/go/bin/go ] || PATH="$PATH:/usr/local/go/bin"
command -v go >/dev/null || { echo "[redfish-mock] Go toolchain not found (go on PATH or /usr/local/go/bin)" >&2; exit 1; }
export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local
t0=$(date +%s)
echo "[redfish-mock] building github.com/ironcore-dev/metal-operator/bmc/mock v$VERSION" >&2
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
(cd "$work" && go mod init local.test/stockade-redfish-mock >/dev/null 2>&1 &&
  go mod edit -require="github.com/ironcore-dev/metal-operator@v$VERSION" &&
  go build -trimpath -ldflags "-s -w" -o redfish-mock github.com/ironcore-dev/metal-operator/bmc/mock)
mkdir -p "$(dirname "$OUT")"
cp "$work/redfish-mock" "$OUT.tmp" && mv "$OUT.tmp" "$OUT"
echo "[redfish-mock] built in $(( $(date +%s) - t0 ))s: $OUT" >&2

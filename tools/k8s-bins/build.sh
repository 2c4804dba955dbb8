#!/usr/bin/env bash
# Builds the lab's Kubernetes components from the official Go modules with the machine's Go toolchain:
# kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kubelet, kube-proxy (one wrapper module, because
# k8s.io/kubernetes requires its staging modules at v0.0.0), etcd and etcdctl (wrapper modules: their
# go.mod files have replace directives), kwok and CoreDNS (plain `go install`), and the lab's own
# programs (lab/programs/<name>/, the images' pause and workloads). Nothing prebuilt is downloaded.
#
# Output: $STOCKADE_CACHE/bin/<component>-<version>/ — keyed by version (the lab programs by a content
# hash of lab/programs), so a warm run is a few stat()s.
# Usage: tools/k8s-bins/build.sh [--print-dir] [target...]    (versions in tools/k8s-bins/versions.env)
#   targets: etcd etcdctl kwok kubernetes lab-programs (default: all)
#        tools/k8s-bins/build.sh --programs-hash    (prints the lab programs' cache key, builds nothing)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PROGRAMS_SRC="$(cd "$HERE/../.." && pwd)/lab/programs"
# shellcheck source=versions.env
source "$HERE/versions.env"
CACHE="${STOCKADE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/stockade}"
K8S_DIR="$CACHE/bin/kubernetes-v$K8S_VERSION"
ETCD_DIR="$CACHE/bin/etcd-v$ETCD_VERSION"
KWOK_DIR="$CACHE/bin/kwok-v$KWOK_VERSION"
COREDNS_DIR="$CACHE/bin/coredns-v$COREDNS_VERSION"
export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local

log() { printf '[k8s-bins] %s\n' "$*" >&2; }
have() { for f in "$@"; do [ -x "$f" ] || return 1; done; }
elapsed() { echo "$(( $(date +%s) - $1 ))s"; }

K8S_COMPONENTS=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy)

build_kubernetes() {
  # Only what is missing: a cache from before kubelet or kube-proxy joined the list keeps its binaries.
  local missing=() c
  for c in "${K8S_COMPONENTS[@]}"; do have "$K8S_DIR/$c" || missing+=("$c"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  local t0; t0=$(date +%s)
  log "building Kubernetes v$K8S_VERSION (${missing[*]}); a cold build takes a while"
  local work; work="$(mktemp -d)"; trap 'rm -rf "$work"' RETURN
  local minor_patch="${K8S_VERSION#1.}" staging_ver="v0.${K8S_VERSION#1.}"
  local up; up=$(cd "$work" && go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  [ -f "$up" ] || { log "could not fetch go.mod of k8s.io/kubernetes@v$K8S_VERSION"; return 1; }
  local staging goline godebug
  staging=$(awk '$1 ~ /^k8s\.io\// && $2=="v0.0.0" {print $1}' "$up" | sort -u)
  goline=$(awk '$1=="go"{print $2; exit}' "$up")
  godebug=$(grep -m1 '^godebug' "$up" || true)
  {
    echo "module local.test/stockade-k8s-bins"; echo
    echo "go $goline"; echo
    [ -n "$godebug" ] && { echo "$godebug"; echo; }
    echo "require k8s.io/kubernetes v$K8S_VERSION"; echo
    echo "tool ("
    for c in "${K8S_COMPONENTS[@]}"; do echo "	k8s.io/kubernetes/cmd/$c"; done
    echo ")"; echo
    echo "replace ("
    for m in $staging k8s.io/sample-cli-plugin k8s.io/sample-controller; do echo "	$m => $m $staging_ver"; done | sort -u
    echo ")"
  } > "$work/go.mod"
  (cd "$work" && go mod tidy)
  local v="v$K8S_VERSION"
  local ld="-s -w -X k8s.io/component-base/version.gitVersion=$v -X k8s.io/component-base/version.gitMajor=1 \
 -X k8s.io/component-base/version.gitMinor=${minor_patch%%.*} -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/component-base/version.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ) \
 -X k8s.io/client-go/pkg/version.gitVersion=$v -X k8s.io/client-go/pkg/version.gitMajor=1 \
 -X k8s.io/client-go/pkg/version.gitMinor=${minor_patch%%.*}"
  mkdir -p "$work/out"
  # One go build for all of them: the package graph is loaded once and the links run beside the compiles
  # (six builds in a row loaded it six times and linked one binary at a time).
  local pkgs=() c2
  for c2 in "${missing[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c2"); done
  log "  go build ${missing[*]}"
  (cd "$work" && go build -trimpath -ldflags "$ld" -o out/ "${pkgs[@]}")
  for c in "${missing[@]}"; do
    [ -x "$work/out/$c" ] || { log "go build wrote no $c"; return 1; }
    [ "$c" = kubectl ] || "$work/out/$c" --version >&2
  done
  # Each binary lands whole or not at all (a rename within the directory).
  mkdir -p "$K8S_DIR"
  for c in "${missing[@]}"; do cp "$work/out/$c" "$K8S_DIR/.$c.tmp" && mv "$K8S_DIR/.$c.tmp" "$K8S_DIR/$c"; done
  log "Kubernetes v$K8S_VERSION built in $(elapsed "$t0")"
}

build_etcd() {
  have "$ETCD_DIR/etcd" && return 0
  local t0; t0=$(date +%s)
  log "building etcd v$ETCD_VERSION"
  local work; work="$(mktemp -d)"; trap 'rm -rf "$work"' RETURN
  printf 'module local.test/stockade-etcd-bin\n\ngo 1.25.0\n' > "$work/go.mod"
  (cd "$work" && go get -tool "go.etcd.io/etcd/server/v3@v$ETCD_VERSION" && \
    go build -trimpath -ldflags "-s -w" -o out/etcd go.etcd.io/etcd/server/v3)
  "$work/out/etcd" --version >&2
  mkdir -p "$(dirname "$ETCD_DIR")" && rm -rf "$ETCD_DIR.tmp" && mv "$work/out" "$ETCD_DIR.tmp" && mv "$ETCD_DIR.tmp" "$ETCD_DIR"
  log "etcd v$ETCD_VERSION built in $(elapsed "$t0")"
}

build_etcdctl() {
  build_etcd # first: build_etcd moves a whole directory into place
  have "$ETCD_DIR/etcdctl" && return 0
  local t0; t0=$(date +%s)
  log "building etcdctl v$ETCD_VERSION"
  local work; work="$(mktemp -d)"; trap 'rm -rf "$work"' RETURN
  printf 'module local.test/stockade-etcdctl-bin\n\ngo 1.25.0\n' > "$work/go.mod"
  (cd "$work" && go get -tool "go.etcd.io/etcd/etcdctl/v3@v$ETCD_VERSION" && \
    go build -trimpath -ldflags "-s -w" -o out/etcdctl go.etcd.io/etcd/etcdctl/v3)
  "$work/out/etcdctl" version >&2
  cp "$work/out/etcdctl" "$ETCD_DIR/.etcdctl.tmp" && mv "$ETCD_DIR/.etcdctl.tmp" "$ETCD_DIR/etcdctl"
  log "etcdctl v$ETCD_VERSION built in $(elapsed "$t0")"
}

# Content hash of lab/programs (paths and contents). lab/bins.ts labProgramsHash() computes the same.
lab_programs_hash() {
  (cd "$PROGRAMS_SRC" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum) | sha256sum | cut -c1-16
}

build_lab_programs() {
  local dest; dest="$CACHE/bin/lab-programs-$(lab_programs_hash)"
  [ -d "$dest" ] && return 0
  local t0; t0=$(date +%s)
  log "building the lab programs into $dest"
  mkdir -p "$CACHE/bin"
  # Built next to its destination so the final rename is atomic.
  local work; work="$(mktemp -d "$CACHE/bin/.lab-programs-XXXXXX")"; trap 'rm -rf "$work"' RETURN
  local d name
  for d in "$PROGRAMS_SRC"/*/; do
    name="$(basename "$d")"
    compgen -G "$d*.go" >/dev/null || continue
    log "  go build $name"
    # -buildvcs=false: the binary depends on the sources only, not on the checkout's commit.
    (cd "$PROGRAMS_SRC" && go build -trimpath -buildvcs=false -ldflags "-s -w" -o "$work/$name" "./$name")
  done
  chmod 755 "$work"
  # Whole or not at all; if a concurrent build got there first, rename(2) refuses the non-empty target.
  mv -T "$work" "$dest" 2>/dev/null || [ -d "$dest" ]
  log "lab programs built in $(elapsed "$t0")"
}

build_kwok() {
  have "$KWOK_DIR/kwok" && [ -d "$KWOK_DIR/stage" ] && return 0
  local t0; t0=$(date +%s)
  log "building kwok v$KWOK_VERSION"
  local work; work="$(mktemp -d)"; trap 'rm -rf "$work"' RETURN
  mkdir -p "$work/out"
  GOBIN="$work/out" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@v$KWOK_VERSION"
  # kwok v0.8 ships no built-in stages; keep the module's stage YAMLs next to the binary.
  local src; src="$(go env GOMODCACHE)/sigs.k8s.io/kwok@v$KWOK_VERSION/kustomize/stage"
  cp -r "$src" "$work/out/stage" && chmod -R u+w "$work/out/stage"
  mkdir -p "$(dirname "$KWOK_DIR")" && rm -rf "$KWOK_DIR.tmp" && mv "$work/out" "$KWOK_DIR.tmp" && mv "$KWOK_DIR.tmp" "$KWOK_DIR"
  log "kwok v$KWOK_VERSION built in $(elapsed "$t0")"
}

# The lab's cluster DNS (lab/cluster-dns.ts). The full upstream plugin set: a cold build (modules and
# compile, 2 cores) took 2.5 min, small next to Kubernetes, so no custom plugin list is worth maintaining.
build_coredns() {
  have "$COREDNS_DIR/coredns" && return 0
  local t0; t0=$(date +%s)
  log "building CoreDNS v$COREDNS_VERSION"
  local work; work="$(mktemp -d)"; trap 'rm -rf "$work"' RETURN
  mkdir -p "$work/out"
  GOBIN="$work/out" go install -trimpath -ldflags "-s -w" "github.com/coredns/coredns@v$COREDNS_VERSION"
  "$work/out/coredns" -version >&2
  mkdir -p "$(dirname "$COREDNS_DIR")" && rm -rf "$COREDNS_DIR.tmp" && mv "$work/out" "$COREDNS_DIR.tmp" && mv "$COREDNS_DIR.tmp" "$COREDNS_DIR"
  log "CoreDNS v$COREDNS_VERSION built in $(elapsed "$t0")"
}

print_dir=0 targets=()
for a in "$@"; do
  case "$a" in
    --print-dir) print_dir=1 ;;
    --programs-hash) lab_programs_hash; exit 0 ;;
    etcd | etcdctl | kwok | kubernetes | coredns | lab-programs) targets+=("$a") ;;
    *) log "unknown argument '$a' (targets: etcd etcdctl kwok kubernetes coredns lab-programs)"; exit 2 ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=(etcd etcdctl kwok kubernetes coredns lab-programs)
command -v go >/dev/null || [ ! -x /usr/local/go/bin/go ] || PATH="$PATH:/usr/local/go/bin"
command -v go >/dev/null || { log "Go toolchain not found (need go >= 1.25 on PATH or in /usr/local/go/bin)"; exit 1; }
T0=$(date +%s)
for t in "${targets[@]}"; do "build_${t//-/_}"; done
log "${targets[*]} ready in $(elapsed "$T0") under $CACHE/bin"
if [ "$print_dir" = 1 ]; then echo "$CACHE/bin"; fi

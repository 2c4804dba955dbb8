#!/usr/bin/env bash
# Everything the tests need that npm does not install: Debian packages (OpenIPMI's ipmi_sim, ipmitool,
# ClusterLabs fence-agents, Redfish clients (redfishtool, python3-sushy), openssl, containerd, runc, CNI plugins,
# busybox-static, iptables, nftables, the Python modules of the AWS peer), Debian trixie's moto (tools/moto.sh) and the Go-built
# Kubernetes components and Redfish emulator (version-keyed caches).
# Idempotent: a machine that has everything pays a few stat() calls.
# Usage: tools/setup.sh [all|demo] [--print]
#   demo: only what `npm run demo` uses (a real-node lab and the operator image): no ClusterLabs agents, Redfish
#         clients or emulator, AWS peer (moto) or kwok, which only the tests use.
#   --print: say what would be installed and built, change nothing.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
profile=all print=0
for a in "$@"; do
  case "$a" in
    all | demo) profile="$a" ;;
    --print) print=1 ;;
    *) echo "setup: unknown argument '$a' (usage: tools/setup.sh [all|demo] [--print])" >&2; exit 2 ;;
  esac
done
# Runs a step, or only names it with --print.
step() { if [ "$print" = 1 ]; then echo "setup: would run: $*"; else "$@"; fi; }

need=()
command -v openssl >/dev/null || need+=(openssl)
command -v ipmi_sim >/dev/null || need+=(openipmi)
command -v ipmitool >/dev/null || need+=(ipmitool)
[ -x /usr/sbin/fence_ipmilan ] || need+=(fence-agents)
# Independent Redfish clients that check the lab's Redfish simulator (fence_redfish comes with fence-agents).
command -v redfishtool >/dev/null || need+=(redfishtool)
/usr/bin/python3 -c "import sushy" 2>/dev/null || need+=(python3-sushy)
# Real-node lab mode: a containerd and a kubelet per node, runc, the CNI plugins, images without a registry
# (busybox from busybox-static), packet filters for partitions (iptables), kube-proxy's nftables mode (nft),
# a node's own mount namespace (util-linux).
command -v containerd >/dev/null || need+=(containerd)
command -v runc >/dev/null || need+=(runc)
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
[ -x /bin/busybox ] && /bin/busybox --list >/dev/null 2>&1 && { ldd /bin/busybox 2>&1 || true; } | grep -q "not a dynamic" || need+=(busybox-static)
command -v iptables >/dev/null || need+=(iptables)
command -v nft >/dev/null || need+=(nftables)
# The operator image (npm run image): Debian's Docker engine and client, and debootstrap for its Node.js base.
[ -x /usr/bin/docker ] && command -v dockerd >/dev/null || need+=(docker.io)
command -v debootstrap >/dev/null || need+=(debootstrap)
# Network namespaces and links (ip), and a stale slot's leftover listeners (ss).
{ command -v ip && command -v ss; } >/dev/null || need+=(iproute2)
# The AWS agent's test peer, trixie's moto (below), runs on bookworm's Python with these; boto3 also drives it in the tests.
for p in python3-boto3 python3-botocore python3-flask python3-flask-cors python3-werkzeug python3-jinja2 python3-responses \
  python3-xmltodict python3-antlr4 python3-dateutil python3-cryptography python3-requests python3-yaml; do
  [ -e "/var/lib/dpkg/info/$p.list" ] || need+=("$p")
done
if [ "$profile" = demo ]; then
  # Only the tests use these: ClusterLabs' agents, the Redfish clients, the AWS peer's Python modules.
  kept=()
  for p in ${need[@]+"${need[@]}"}; do case "$p" in fence-agents | redfishtool | python3-*) ;; *) kept+=("$p") ;; esac; done
  need=(${kept[@]+"${kept[@]}"})
fi
if [ "$print" = 1 ]; then
  echo "setup ($profile): would install Debian packages: ${need[*]:-none}"
elif [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing Debian packages: ${need[*]} — run: sudo apt-get install -y ${need[*]}" >&2
    exit 1
  fi
  echo "setup: installing Debian packages: ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

[ "$profile" = demo ] || step bash "$HERE/moto.sh"

command -v go >/dev/null || [ -x /usr/local/go/bin/go ] || {
  echo "setup: the Go toolchain (>= 1.25) is needed to build the lab's Kubernetes components; install it and put go on PATH" >&2
  exit 1
}
export PATH="$PATH:/usr/local/go/bin"
if [ "$profile" = demo ]; then
  # The operator image builds meanwhile: its cold build waits mostly on the network and disk (debootstrap,
  # npm ci, apt), the Go builds on the 2 cores, so together they take less than one after the other. The
  # build is cached by its inputs: the demo then finds it, and a warm run pays one hash of the sources.
  root="$(cd "$HERE/.." && pwd)"
  if [ "$print" = 1 ]; then
    echo "setup: would run meanwhile: $root/node_modules/.bin/node $root/tools/image/build.ts"
  else
    # Its progress (stderr, "image: …" lines) shows as it goes; what it built (stdout) is said at the end.
    image_out="$(mktemp -t stockade-setup-image-XXXXXX)"
    "$root/node_modules/.bin/node" "$root/tools/image/build.ts" >"$image_out" &
    image_pid=$!
    trap 'kill "$image_pid" 2>/dev/null || true; rm -f "$image_out"' EXIT
  fi
  # A real-node lab's binaries, no kwok: the list lab/bins.ts REAL_NODE_BUILD_TARGETS builds.
  step bash "$HERE/k8s-bins/build.sh" etcd etcdctl kubernetes coredns lab-programs
  if [ "$print" = 0 ]; then
    wait "$image_pid" || {
      echo "setup: building the operator image failed (above); retry it alone with: npm run image" >&2
      exit 1
    }
    trap 'rm -f "$image_out"' EXIT
    sed 's/^/image: /' "$image_out" >&2
  fi
else
  step bash "$HERE/k8s-bins/build.sh"
  step bash "$HERE/redfish-mock/build.sh"
fi

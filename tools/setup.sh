#!/usr/bin/env bash
# Everything the tests need that npm does not install: Debian packages (OpenIPMI's ipmi_sim, ipmitool,
# ClusterLabs fence-agents, openssl) and the Go-built Kubernetes components (version-keyed cache).
# Idempotent: a machine that has everything pays a few stat() calls.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

need=()
command -v openssl >/dev/null || need+=(openssl)
command -v ipmi_sim >/dev/null || need+=(openipmi)
command -v ipmitool >/dev/null || need+=(ipmitool)
[ -x /usr/sbin/fence_ipmilan ] || need+=(fence-agents)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing Debian packages: ${need[*]} — run: sudo apt-get install -y ${need[*]}" >&2
    exit 1
  fi
  echo "setup: installing Debian packages: ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

command -v go >/dev/null || [ -x /usr/local/go/bin/go ] || {
  echo "setup: the Go toolchain (>= 1.25) is needed to build the lab's Kubernetes components; install it and put go on PATH" >&2
  exit 1
}
export PATH="$PATH:/usr/local/go/bin"
bash "$HERE/k8s-bins/build.sh"

#!/usr/bin/env bash
# CPU of the lab's processes, every 2 s, as % of one core: who has the machine's two cores while a bench runs (e.g.
# during the operator's cache sync in `npm run bench:scale`). Reads /proc; stop it with Ctrl-C.
#   bash bench/process-cpu.sh > cpu.log &   (then run the bench; grep the window of interest)
set -euo pipefail
hz=$(getconf CLK_TCK)
patterns=("kube-apiserver" "etcd --" "kwok" "src/main.ts" "bench/scale.ts" "kube-controller-manager")
labels=(apiserver etcd kwok operator bench controller-manager)
declare -A last
while true; do
  line="$(date +%H:%M:%S)"
  for i in "${!patterns[@]}"; do
    total=0
    for pid in $(pgrep -f -- "${patterns[$i]}" || true); do
      ticks=$(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0)
      total=$((total + ticks))
    done
    prev=${last[$i]:-$total}
    last[$i]=$total
    line="$line ${labels[$i]}=$(((total - prev) * 100 / hz / 2))%"
  done
  echo "$line"
  sleep 2
done

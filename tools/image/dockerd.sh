#!/usr/bin/env bash
# A dockerd of our own for building the operator image: its own data root, exec root, pid file and socket
# under DIR, and kept off the host's firewall (no iptables chains, NAT, forwarding or bridge: other labs and
# their network namespaces live on this machine). Build steps use `--network host` instead.
#
#   dockerd.sh start DIR   start it unless it already answers on DIR/docker.sock; prints the DOCKER_HOST
#   dockerd.sh stop DIR    stop it and unmount whatever it left mounted under DIR
set -euo pipefail
cmd="${1:?usage: dockerd.sh start|stop DIR}"
dir="${2:?usage: dockerd.sh start|stop DIR}"
sock="$dir/docker.sock"
pidfile="$dir/dockerd.pid"
# The docker.io package's own client: a newer one may come first on PATH.
docker=(/usr/bin/docker -H "unix://$sock")

alive() { [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }

case "$cmd" in
start)
  if "${docker[@]}" version >/dev/null 2>&1; then
    echo "unix://$sock"
    exit 0
  fi
  # Two builds starting at once: one starts it, the other waits and finds it answering.
  mkdir -p "$dir"
  exec 9>"$dir/start.lock"
  flock 9
  if "${docker[@]}" version >/dev/null 2>&1; then
    echo "unix://$sock"
    exit 0
  fi
  command -v dockerd >/dev/null || {
    echo "dockerd.sh: dockerd is missing: install Debian's docker.io (npm run setup does)" >&2
    exit 1
  }
  if alive; then
    echo "dockerd.sh: dockerd $(cat "$pidfile") runs but does not answer on $sock; see $dir/dockerd.log or run: $0 stop $dir" >&2
    exit 1
  fi
  mkdir -p "$dir/root" "$dir/exec"
  rm -f "$sock" "$pidfile"
  # setsid: it outlives the build that started it and is reused by the next one.
  setsid -f dockerd --iptables=false --ip-forward=false --ip-masq=false --bridge=none \
    --data-root "$dir/root" --exec-root "$dir/exec" --pidfile "$pidfile" -H "unix://$sock" \
    </dev/null >"$dir/dockerd.log" 2>&1 9>&-
  for _ in $(seq 1 120); do
    if "${docker[@]}" version >/dev/null 2>&1; then
      echo "unix://$sock"
      exit 0
    fi
    sleep 0.25
  done
  echo "dockerd.sh: dockerd did not answer on $sock within 30 s; its log:" >&2
  tail -20 "$dir/dockerd.log" >&2
  exit 1
  ;;
stop)
  if alive; then
    pid="$(cat "$pidfile")"
    kill -TERM "$pid"
    for _ in $(seq 1 60); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.5
    done
    kill -0 "$pid" 2>/dev/null && {
      echo "dockerd.sh: dockerd $pid did not stop within 30 s" >&2
      exit 1
    }
  fi
  # Its overlay, netns (nsfs) and shm mounts, deepest first.
  awk -v d="$dir/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r | while read -r m; do
    umount -l "$m" 2>/dev/null || true
  done
  rm -f "$sock" "$pidfile"
  ;;
*)
  echo "usage: dockerd.sh start|stop DIR" >&2
  exit 2
  ;;
esac

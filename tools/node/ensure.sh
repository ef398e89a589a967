#!/usr/bin/env bash
# The node tier's binaries, checked for and built once (`make node`, tests/node): first
# whether this machine can run a kubelet at all, then tools/node/build.sh (kubelet,
# kube-proxy, containerd, runc, CNI, pause) and tools/node/coredns.sh (the cluster DNS), each
# printing its cache directory on stdout, with what a first run needs around them:
#
#   * a machine that cannot run the node (not root, no cgroup v1 memory hierarchy, no
#     unshare/nsenter) fails at once, in one line naming the cause and EDL_NODE=0;
#   * progress: while a script compiles, a line every 30 s with the packages compiled so far;
#   * a failed build ends with the script's one line naming the missing piece.
#
# The scripts stay the recipes (each one's text is part of its cache key); this is only the
# wrapper.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
off="EDL_NODE=0 turns the node tier off"
say() { echo "tools/node: $*" >&2; }

# The same checks as tests/node/conftest.py's unfit_machine().
if [[ "$(id -u)" != 0 ]]; then
  say "the node tier needs root (a kubelet, containerd and namespaces); $off"; exit 1
fi
if [[ ! -e /sys/fs/cgroup/memory/cgroup.procs ]]; then
  say "the node tier needs the cgroup v1 memory hierarchy at /sys/fs/cgroup/memory; $off"; exit 1
fi
for tool in unshare nsenter; do
  command -v "$tool" >/dev/null 2>&1 || { say "the node tier needs $tool (util-linux); $off"; exit 1; }
done

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# build SCRIPT ESTIMATE: run tools/node/SCRIPT with progress; its directory on stdout.
build() {
  local script="$1" estimate="$2" log="$work/$1.log" start=$SECONDS building=0 next=30 pid rc
  # -v: go build names each package it compiles, which is what the progress line counts.
  GOFLAGS="${GOFLAGS:-} -v" bash "$here/$script" >"$work/out" 2>"$log" &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 0.5
    if (( ! building )) && grep -q "^building the node tier" "$log"; then
      building=1
      say "$(grep -m1 "^building the node tier" "$log")"
      say "$estimate"
    fi
    if (( building && SECONDS - start >= next )); then
      next=$((next + 30))
      # the scripts keep Go's output in their temporary directory under the cache
      golog="$(ls -t "${EDL_NODE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/edl/node}"/*/.build.*/go.log 2>/dev/null | head -1)"
      compiled=$([[ -n "$golog" ]] && grep -cvE "^(go: |#|\s)" "$golog" || echo 0)
      say "$((SECONDS - start)) s: $compiled packages compiled"
    fi
  done
  wait "$pid"
  rc=$?
  if (( rc == 0 )); then
    (( building )) && say "$(grep "^built in" "$log" | tail -1)"
    cat "$work/out"
    return 0
  fi
  # Go's last words (if it got that far), then the script's one line naming the missing piece.
  grep -vE "^(go: downloading|building )" "$log" | grep -v "^tools/node/$script:" | tail -n 5 >&2
  line="$(grep "^tools/node/$script:" "$log" | tail -1)"
  if [[ -n "$line" ]]; then echo "$line" >&2; else say "$script failed ($rc); $off"; fi
  exit "$rc"
}

build build.sh "about 15 CPU-minutes cold (892 s measured on a busy machine), a minute once \
the control plane's build has filled Go's cache"
build coredns.sh "about 2.5 CPU-minutes cold (184 s measured at load 6-10), 1.5 once the \
kubelet's build has filled Go's cache"

#!/usr/bin/env bash
# The Kubernetes e2e binaries, built once: runs build.sh (which prints their directory on
# stdout) and adds what a first run on a fresh machine needs around it:
#
#   * one build at a time: test workers (pytest -n) and `make k8s` may ask at once; the
#     first builds, the others wait on a lock and then reuse its result;
#   * progress: while build.sh compiles, a line every 30 s with the packages compiled so
#     far (of about 3,000) and the time taken;
#   * a failed build names the missing piece (network to the module proxy, a Go too old,
#     disk space, memory) before the last lines of Go's output.
#
# build.sh stays the recipe (its text is part of the cache key); this is only the wrapper.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${EDL_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/edl/k8s}"
mkdir -p "$cache_root"
exec 9>"$cache_root/.build.lock"
flock 9

say() { echo "tools/k8s: $*" >&2; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
log="$work/build.log"
start=$SECONDS
# -v: go build names each package it compiles, which is what the progress line counts.
GOFLAGS="${GOFLAGS:-} -v" bash "$here/build.sh" >"$work/out" 2>"$log" &
pid=$!
building=0
while kill -0 "$pid" 2>/dev/null; do
  sleep 2
  if (( ! building )) && grep -q "^building Kubernetes" "$log"; then
    building=1
    say "$(grep -m1 "^building Kubernetes" "$log")"
    say "about 15 CPU-minutes: 8-10 min on 2 idle cores, longer on a busy machine;" \
        "the first time it also downloads about 300 MB of Go modules"
  fi
  if (( building && (SECONDS - start) % 30 < 2 )); then
    downloaded=$(grep -c "^go: downloading" "$log")
    compiled=$(grep -cvE "^(go: |building |#|\s)" "$log")
    say "$((SECONDS - start)) s: $compiled of about 3,000 packages compiled" \
        "($downloaded modules downloaded)"
    sleep 1
  fi
done
wait "$pid"
rc=$?
if (( rc == 0 )); then
  (( building )) && say "$(grep "^built in" "$log" | tail -1)"
  cat "$work/out"
  exit 0
fi

# What is missing, in one line, then Go's own words.
if grep -q "no Go toolchain on PATH" "$log"; then
  grep -v "^go: downloading" "$log" >&2
  exit "$rc"
elif grep -qE "dial tcp|no such host|server misbehaving|i/o timeout|TLS handshake|proxyconnect|connection refused" "$log"; then
  say "build failed: the Go module proxy (${GOPROXY:-$(go env GOPROXY)}) cannot be reached;" \
      "it needs network access to download the pinned modules, or GOPROXY set to a mirror"
elif grep -qE "requires go >=|toolchain not available|go: updates to go.mod needed|invalid go version" "$log"; then
  say "build failed: Go $(go env GOVERSION) is too old for the pinned modules" \
      "($(grep -m1 -oE "requires go >= ?[0-9.]+" "$log" || echo "see below")); install Go >= 1.26"
elif grep -qi "no space left on device" "$log"; then
  say "build failed: no space left on device (modules in $(go env GOMODCACHE), build cache" \
      "in $(go env GOCACHE), binaries in $cache_root)"
elif grep -qE "signal: killed|cannot allocate memory|out of memory" "$log"; then
  say "build failed: the Go compiler or linker ran out of memory (linking kube-apiserver" \
      "takes about 2 GB)"
else
  say "build failed (exit $rc):"
fi
grep -v "^go: downloading" "$log" | tail -n 25 >&2
exit "$rc"

#!/usr/bin/env bash
# Build (or reuse) CoreDNS for the node tier's cluster DNS, into a cache directory outside
# the work tree keyed by the pins; prints that directory (holding `coredns`) on stdout.
#
# coredns/main.go is CoreDNS's own coremain with only the plugins cluster DNS uses
# (kubernetes, bind, cache, errors, health, ready, log); coredns/go.mod pins the CoreDNS
# release and the k8s.io modules at tools/node/go.mod's release, so Go's caches share them.
#
# One build at a time (a lock in the cache directory). Any missing piece exits non-zero with
# one line naming it and EDL_NODE=0 (the switch that turns tests/node off).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="$here/coredns"

fail() { echo "tools/node/coredns.sh: $* (EDL_NODE=0 turns the node tier off)" >&2; exit 1; }

version="$(awk '{sub(/^require /, "")} $1 == "github.com/coredns/coredns" {print $2}' "$src/go.mod")"
cache_root="${EDL_NODE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/edl/node}"
digest="$(cat "$src/go.mod" "$src/go.sum" "$src/main.go" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-8)"
out="$cache_root/coredns-$version-$digest"
if [[ -x "$out/coredns" ]]; then echo "$out"; exit 0; fi

mkdir -p "$cache_root"
exec 9>"$cache_root/.coredns.lock"
flock 9
if [[ -x "$out/coredns" ]]; then echo "$out"; exit 0; fi

command -v go >/dev/null 2>&1 || fail "no Go toolchain on PATH (needed to build CoreDNS)"

mkdir -p "$out"
tmp="$(mktemp -d "$out/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS
echo "building the node tier's CoreDNS $version into $out (first time only)" >&2

export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=mod"
# A copy of the module: `go build -mod=mod` may touch go.sum, never in the work tree.
cp "$src/go.mod" "$src/go.sum" "$src/main.go" "$tmp/"
stamp="-X github.com/coredns/coredns/coremain.GitCommit=$version-edl"
(cd "$tmp" && go build -trimpath -ldflags "-s -w $stamp" -o "$tmp/coredns" .) \
  >"$tmp/go.log" 2>&1 \
  || { tail -n 20 "$tmp/go.log" >&2; fail "go build of CoreDNS $version failed"; }
"$tmp/coredns" -plugins >"$tmp/plugins" 2>&1 && grep -qE "^\s*(dns\.)?kubernetes$" "$tmp/plugins" \
  || fail "the CoreDNS build has no kubernetes plugin: $(tr '\n' ' ' <"$tmp/plugins")"
mv "$tmp/coredns" "$out/coredns"
echo "built in $((SECONDS - start)) s: $(du -sh "$out/coredns" | cut -f1)" >&2
echo "$out"

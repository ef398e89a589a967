#!/usr/bin/env bash
# Build (or reuse) what a real Kubernetes node needs for tests/node, into a cache directory
# outside the work tree keyed by the pins; prints that directory on stdout. It holds:
#
#   kubelet, kube-proxy  built from the k8s.io/kubernetes module pinned in this folder's go.mod
#                        (the same release and replaces as tools/k8s/go.mod, so the shared Go
#                        build cache already holds most of it once the control plane is built)
#   pause                compiled from build/pause/linux/pause.c of that module (static)
#   containerd, containerd-shim-runc-v2, ctr, runc, cni/{bridge,host-local,loopback}, and
#   nft (a wrapper naming its libraries in lib/, for kube-proxy's nftables mode)
#                        from Debian's packages (`apt-get download` + `dpkg-deb -x`: nothing
#                        is installed system-wide)
#
# One build at a time (a lock in the cache directory). Any missing piece exits non-zero with
# one line naming it and EDL_NODE=0 (the switch that turns tests/node off).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
debs=(containerd runc containernetworking-plugins nftables libnftables1 libnftnl11)
bins=(kubelet kube-proxy pause containerd containerd-shim-runc-v2 ctr runc
      cni/bridge cni/host-local cni/loopback nft)

fail() { echo "tools/node/build.sh: $* (EDL_NODE=0 turns the node tier off)" >&2; exit 1; }

has_all() {
  local d="$1" b
  for b in "${bins[@]}"; do [[ -x "$d/$b" ]] || return 1; done
}

k8s_version="$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' "$here/go.mod")"
cache_root="${EDL_NODE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/edl/node}"
digest="$(cat "$here/go.mod" "$here/go.sum" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-8)"
out="$cache_root/$k8s_version-$digest"
if has_all "$out"; then echo "$out"; exit 0; fi

mkdir -p "$cache_root"
exec 9>"$cache_root/.build.lock"
flock 9
if has_all "$out"; then echo "$out"; exit 0; fi

command -v go >/dev/null 2>&1 || fail "no Go toolchain on PATH (needed to build the kubelet)"
command -v gcc >/dev/null 2>&1 || fail "no C compiler (gcc) on PATH (needed to build pause)"
command -v apt-get >/dev/null 2>&1 || fail "no apt-get (containerd, runc and CNI come from Debian)"

mkdir -p "$out"
tmp="$(mktemp -d "$out/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS
echo "building the node tier's kubelet and kube-proxy $k8s_version into $out (first time only)" >&2

# Debian's packages, unpacked into $tmp/root.
(cd "$tmp" && apt-get download "${debs[@]}" >"$tmp/apt.log" 2>&1) \
  || fail "apt-get download ${debs[*]} failed: $(tail -1 "$tmp/apt.log")"
for deb in "$tmp"/*.deb; do dpkg-deb -x "$deb" "$tmp/root"; done

export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=mod"
minor="${k8s_version#v1.}"; minor="${minor%%.*}"
stamp="-X k8s.io/component-base/version.gitVersion=$k8s_version"
stamp+=" -X k8s.io/component-base/version.gitMajor=1"
stamp+=" -X k8s.io/component-base/version.gitMinor=$minor"
stamp+=" -X k8s.io/client-go/pkg/version.gitVersion=$k8s_version"
# A copy of the module files: `go build -mod=mod` may touch go.sum, never in the work tree.
cp "$here/go.mod" "$here/go.sum" "$tmp/"
(cd "$tmp" && go build -trimpath -ldflags "-s -w $stamp" -o "$tmp/" \
  k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy) >"$tmp/go.log" 2>&1 \
  || { tail -n 20 "$tmp/go.log" >&2; fail "go build of the kubelet failed"; }

module="$(cd "$tmp" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)"
gcc -Os -static -DVERSION="$k8s_version-edl" -o "$tmp/pause" "$module/build/pause/linux/pause.c" \
  || fail "gcc could not build pause statically (is libc6-dev installed?)"
strip "$tmp/pause" 2>/dev/null || true

mkdir -p "$out/cni"
for b in containerd containerd-shim-runc-v2 ctr; do mv "$tmp/root/usr/bin/$b" "$out/$b"; done
mv "$tmp/root/usr/sbin/runc" "$out/runc"
for b in bridge host-local loopback; do mv "$tmp/root/usr/lib/cni/$b" "$out/cni/$b"; done
mkdir -p "$out/lib"
mv "$tmp/root/usr/sbin/nft" "$out/lib/nft"
cp -a "$tmp"/root/usr/lib/x86_64-linux-gnu/libnft*.so* "$out/lib/"
printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "$out/lib" "$out/lib/nft" >"$out/nft"
chmod +x "$out/nft"
for b in kubelet kube-proxy pause; do mv "$tmp/$b" "$out/$b"; done
echo "built in $((SECONDS - start)) s: $(du -sh "$out" | cut -f1)" >&2
echo "$out"

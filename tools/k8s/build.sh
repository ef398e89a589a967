#!/usr/bin/env bash
# Build (or reuse) kube-apiserver, kube-controller-manager, kube-scheduler and kwok from the
# pinned Go modules in this folder into a cache directory outside the work tree, keyed by the
# pinned versions. Prints the directory holding the four binaries on stdout.
#
# KUBEBUILDER_ASSETS (the envtest convention): if it names a directory holding all four
# binaries, that directory is used and nothing is built. A missing Go toolchain or a failed
# build exits non-zero: the e2e suite is never silently skipped.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bins=(kube-apiserver kube-controller-manager kube-scheduler kwok)

has_all() {
  local d="$1" b
  for b in "${bins[@]}"; do [[ -x "$d/$b" ]] || return 1; done
}

if [[ -n "${KUBEBUILDER_ASSETS:-}" ]] && has_all "$KUBEBUILDER_ASSETS"; then
  echo "$KUBEBUILDER_ASSETS"
  exit 0
fi

# The version a go.mod requires a module at (`require m vX` or a line inside `require (...)`).
mod_version() {
  awk -v m="$2" '{for (i = 1; i < NF; i++) if ($i == m && $(i+1) ~ /^v/) {print $(i+1); exit}}' "$1"
}
k8s_version="$(mod_version "$here/go.mod" k8s.io/kubernetes)"
kwok_version="$(mod_version "$here/kwok/go.mod" sigs.k8s.io/kwok)"
cache_root="${EDL_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/edl/k8s}"
# Versions in the name for people; a digest of the pins and this script so that any
# change to them (a replace directive, a flag) builds afresh instead of reusing.
digest="$(cat "$here/go.mod" "$here/go.sum" "$here/kwok/go.mod" "$here/kwok/go.sum" \
  "${BASH_SOURCE[0]}" | sha256sum | cut -c1-8)"
out="$cache_root/$k8s_version-$kwok_version-$digest"

if has_all "$out"; then
  echo "$out"
  exit 0
fi

if ! command -v go >/dev/null 2>&1; then
  echo "tools/k8s/build.sh: no Go toolchain on PATH (needed to build the Kubernetes e2e binaries;" \
       "install Go >= 1.26, or set EDL_E2E=0 to turn the e2e suite off)" >&2
  exit 1
fi

mkdir -p "$out"
tmp="$(mktemp -d "$out/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=mod"
minor="${k8s_version#v1.}"; minor="${minor%%.*}"
stamp="-X k8s.io/component-base/version.gitVersion=$k8s_version"
stamp+=" -X k8s.io/component-base/version.gitMajor=1"
stamp+=" -X k8s.io/component-base/version.gitMinor=$minor"
stamp+=" -X k8s.io/client-go/pkg/version.gitVersion=$k8s_version"
flags=(-trimpath -ldflags "-s -w $stamp")
start=$SECONDS
echo "building Kubernetes $k8s_version and kwok $kwok_version into $out (first time only)" >&2
(cd "$here" && go build "${flags[@]}" -o "$tmp/" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler)
(cd "$here/kwok" && go build -trimpath -ldflags "-s -w" -o "$tmp/" sigs.k8s.io/kwok/cmd/kwok)
for b in "${bins[@]}"; do mv "$tmp/$b" "$out/$b"; done
echo "built in $((SECONDS - start)) s: $(du -sh "$out" | cut -f1)" >&2
echo "$out"

#!/usr/bin/env bash
# Build (or reuse) Kueue's controller manager from the pinned Go module in this folder into
# a cache directory outside the work tree, keyed by the pinned version and a digest of the
# pins and this script. Prints the directory on stdout; it holds `kueue`, `crds/` (the
# CustomResourceDefinitions from the same module's config/components/crd/bases) and
# `webhooks.yaml` (its webhook configurations, config/components/webhook/manifests.yaml).
#
# One build at a time (a lock in the cache root: pytest workers may ask at once), a progress
# line every 30 s while Go compiles, and a failed build names the missing piece before the
# last lines of Go's output. EDL_KUEUE_BIN: a directory already holding all three.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
say() { echo "tools/kueue: $*" >&2; }

if [[ -n "${EDL_KUEUE_BIN:-}" && -x "${EDL_KUEUE_BIN}/kueue" && -d "${EDL_KUEUE_BIN}/crds" \
      && -f "${EDL_KUEUE_BIN}/webhooks.yaml" ]]; then
  echo "$EDL_KUEUE_BIN"
  exit 0
fi

version="$(awk '$1 == "require" && $2 == "sigs.k8s.io/kueue" {print $3}' "$here/go.mod")"
cache_root="${EDL_KUEUE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/edl/kueue}"
digest="$(cat "$here/go.mod" "$here/go.sum" "$here/tools.go" "${BASH_SOURCE[0]}" \
  | sha256sum | cut -c1-8)"
out="$cache_root/$version-$digest"
ready() { [[ -x "$out/kueue" && -f "$out/webhooks.yaml" && -f "$out/crds/.complete" ]]; }

if ready; then echo "$out"; exit 0; fi
if ! command -v go >/dev/null 2>&1; then
  say "no Go toolchain on PATH (needed to build Kueue $version for the e2e suite;" \
      "install Go >= 1.26, or set EDL_E2E=0 to turn the e2e suite off)"
  exit 1
fi

mkdir -p "$cache_root"
exec 9>"$cache_root/.build.lock"
flock 9
if ready; then echo "$out"; exit 0; fi   # another worker built it while we waited

mkdir -p "$out"
work="$(mktemp -d "$out/.build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
log="$work/build.log"
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=mod"
start=$SECONDS
say "building Kueue $version into $out (first time only: about 1,700 packages;" \
    "29 min on a 2-core machine shared with other builds, load 15-21)"
(cd "$here" && go build -v -trimpath \
  -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$version" \
  -o "$work/kueue" sigs.k8s.io/kueue/cmd/kueue) >"$log" 2>&1 &
pid=$!
said=$SECONDS
while kill -0 "$pid" 2>/dev/null; do
  sleep 2
  if (( SECONDS - said >= 30 )); then
    said=$SECONDS
    say "$((SECONDS - start)) s: $(grep -cvE "^(go: |#|\s)" "$log") of about 1,700 packages" \
        "compiled ($(grep -c "^go: downloading" "$log") modules downloaded)"
  fi
done
wait "$pid"
rc=$?
if (( rc != 0 )); then
  if grep -qE "dial tcp|no such host|server misbehaving|i/o timeout|TLS handshake|proxyconnect|connection refused" "$log"; then
    say "build failed: the Go module proxy (${GOPROXY:-$(go env GOPROXY)}) cannot be reached"
  elif grep -qE "requires go >=|toolchain not available|invalid go version" "$log"; then
    say "build failed: Go $(go env GOVERSION) is too old for Kueue $version; install Go >= 1.26"
  elif grep -qi "no space left on device" "$log"; then
    say "build failed: no space left on device (modules in $(go env GOMODCACHE), build cache" \
        "in $(go env GOCACHE), binaries in $cache_root)"
  elif grep -qE "signal: killed|cannot allocate memory|out of memory" "$log"; then
    say "build failed: the Go compiler or linker ran out of memory"
  else
    say "build failed (exit $rc):"
  fi
  grep -v "^go: downloading" "$log" | tail -n 25 >&2
  exit "$rc"
fi
src="$(cd "$here" && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)"
if [[ -z "$src" || ! -d "$src/config/components/crd/bases" \
      || ! -f "$src/config/components/webhook/manifests.yaml" ]]; then
  say "Kueue $version built, but its module has no config/components/crd/bases" \
      "or config/components/webhook/manifests.yaml"
  exit 1
fi
rm -rf "$out/crds"
mkdir -p "$out/crds"
cp "$src"/config/components/crd/bases/*.yaml "$out/crds/"
cp "$src/config/components/webhook/manifests.yaml" "$out/webhooks.yaml"
chmod -R u+w "$out/crds"
touch "$out/crds/.complete"
mv "$work/kueue" "$out/kueue"
say "built in $((SECONDS - start)) s: $(du -sh "$out/kueue" | cut -f1)"
echo "$out"

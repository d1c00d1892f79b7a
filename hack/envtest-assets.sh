#!/usr/bin/env bash
# Builds the envtest control plane (kube-apiserver, etcd) and kubectl from source through
# the Go module proxy, because prebuilt envtest binaries cannot be downloaded here.
# Output: bin/k8s/{kube-apiserver,etcd,kubectl}. A binary already built from the same
# tools module (go.sum hash) is kept, so repeat runs take seconds.
#
# The tool modules live in hack/tools/{k8s,etcd}: k8s.io/kubernetes' module zip lacks its
# staging tree, so hack/tools/k8s/go.mod replaces each staging module with the published
# k8s.io/<name> v0.37.2 release.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-"$root/bin/k8s"}
mkdir -p "$out"

# Stamp the release into the binaries; a plain `go build` reports v0.0.0-master.
k8s_version=v1.37.2
k8s_ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version \
  -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37 \
  -X k8s.io/client-go/pkg/version.gitVersion=$k8s_version \
  -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=37"

# build <tools-module-dir> <binary-name> <package> <ldflags>
build() {
  local dir=$1 name=$2 pkg=$3 ldflags=$4
  local stamp="$out/.$name.stamp"
  local want
  want=$( (cat "$dir/go.mod" "$dir/go.sum"; echo "$ldflags") | sha256sum | cut -c1-16)
  if [[ -x "$out/$name" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    return
  fi
  echo "envtest-assets: building $name (first build takes several minutes)" >&2
  # Default build settings (no -trimpath, cgo as usual), so the compiled k8s.io packages
  # in the Go build cache are the same ones the project's own tests link against.
  (cd "$dir" && go build -ldflags="$ldflags" -o "$out/$name.tmp" "$pkg")
  mv "$out/$name.tmp" "$out/$name"
  echo "$want" > "$stamp"
}

build "$root/hack/tools/etcd" etcd go.etcd.io/etcd/server/v3 "-s -w"
build "$root/hack/tools/k8s" kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$k8s_ldflags"
build "$root/hack/tools/k8s" kubectl k8s.io/kubernetes/cmd/kubectl "$k8s_ldflags"

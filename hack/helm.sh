#!/usr/bin/env bash
# Runs helm with the given arguments, e.g. `hack/helm.sh lint --strict charts/switchboard`.
# Helm is built from source through the Go module proxy, pinned by the tool module
# hack/tools/helm, into bin/helm. A binary already built from the same tool module
# (go.mod + go.sum hash) is kept, so repeat runs start at once. `hack/helm.sh` with no
# arguments only builds it.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
dir="$root/hack/tools/helm"
bin="$root/bin/helm"
stamp="$root/bin/.helm.stamp"
mkdir -p "$root/bin"

# A plain build of a dependency's main package reports helm's major.minor only ("v4.3");
# stamp the pinned release, as helm's own Makefile does for a tagged build.
version=$(cd "$dir" && go list -m -f '{{.Version}}' helm.sh/helm/v4)
ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=$version -X helm.sh/helm/v4/internal/version.gitTreeState=clean"

want=$( (cat "$dir/go.mod" "$dir/go.sum"; echo "$ldflags") | sha256sum | cut -c1-16)
if [[ ! -x "$bin" || ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
  echo "helm: building helm $version (first build takes a few minutes)" >&2
  # Default build settings (no -trimpath, cgo as usual), so the standard library and any
  # module version shared with the project come from the same Go build cache entries.
  (cd "$dir" && go build -ldflags="$ldflags" -o "$bin.tmp" helm.sh/helm/v4/cmd/helm)
  mv "$bin.tmp" "$bin"
  echo "$want" > "$stamp"
fi

[[ $# -eq 0 ]] && exit 0
cd "$root"
exec "$bin" "$@"

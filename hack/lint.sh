#!/usr/bin/env bash
# Runs golangci-lint (configured by .golangci.yml) with the given arguments, e.g.
# `hack/lint.sh run ./...`. The linter is built from source through the Go module proxy,
# pinned by the tool module hack/tools/lint, into bin/golangci-lint. A binary already built
# from the same tool module (go.mod + go.sum hash) is kept, so repeat runs start at once.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
dir="$root/hack/tools/lint"
bin="$root/bin/golangci-lint"
stamp="$root/bin/.golangci-lint.stamp"
mkdir -p "$root/bin"

# A plain build of a dependency's main package reports its version as "(devel)"; stamp the
# pinned one. main.date must be non-empty too, or the build info overrides main.version.
version=$(cd "$dir" && go list -m -f '{{.Version}}' github.com/golangci/golangci-lint/v2)
ldflags="-X main.version=${version#v} -X main.commit=hack/tools/lint -X main.date=(unknown)"

want=$( (cat "$dir/go.mod" "$dir/go.sum"; echo "$ldflags") | sha256sum | cut -c1-16)
if [[ ! -x "$bin" || ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
  echo "lint: building golangci-lint $version (first build takes a few minutes)" >&2
  # Default build settings (no -trimpath, cgo as usual), so the standard library and any
  # module version shared with the project come from the same Go build cache entries.
  (cd "$dir" && go build -ldflags="$ldflags" -o "$bin.tmp" github.com/golangci/golangci-lint/v2/cmd/golangci-lint)
  mv "$bin.tmp" "$bin"
  echo "$want" > "$stamp"
fi

cd "$root"
exec "$bin" "$@"

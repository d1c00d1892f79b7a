#!/usr/bin/env bash
# Finds code copied across the packages under the given directories (default
# runtime/providers) with dupl at the threshold .golangci.yml sets for it. golangci-lint
# runs dupl on one package at a time, so it never compares two adapters; this runs the
# same detector (github.com/golangci/dupl, pinned by hack/tools/lint) over all their
# non-test, non-generated files at once. It prints every copy and fails if there is one.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
threshold=$(awk '/^    dupl:/ { in_dupl = 1; next } in_dupl && /^      threshold:/ { print $2; exit }' "$root/.golangci.yml")
if [[ -z "$threshold" ]]; then
  echo "dupl: no linters.settings.dupl.threshold in .golangci.yml" >&2
  exit 1
fi

cd "$root"
dirs=("${@:-runtime/providers}")
files=()
while IFS= read -r f; do
  grep -q '^// Code generated .* DO NOT EDIT\.$' "$f" || files+=("$root/$f")
done < <(find "${dirs[@]}" -name '*.go' ! -name '*_test.go' | sort)
copies=$(cd hack/tools/lint && printf '%s\n' "${files[@]}" | go run github.com/golangci/dupl -files -plumbing -t "$threshold")
if [[ -n "$copies" ]]; then
  sed "s|$root/||g" <<<"$copies" | sort
  echo "dupl: code copied across ${dirs[*]} (threshold $threshold tokens); share it instead" >&2
  exit 1
fi

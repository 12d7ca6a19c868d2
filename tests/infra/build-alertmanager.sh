#!/bin/sh
# Build the real Prometheus Alertmanager the alert tests deliver to, only when missing: `go install`
# of its module at a pinned version from the Go module proxy into a cached GOBIN, the version
# stamped as its own release build stamps it (so `alertmanager --version` and /api/v2/status say it).
set -eu
version=0.28.1
gobin="${DB2VTOP_GOBIN:-${XDG_CACHE_HOME:-$HOME/.cache}/db2vtop/gobin}"
target="$gobin/alertmanager-$version"
[ -x "$target" ] && exit 0
if ! command -v go >/dev/null 2>&1; then
    echo "build-alertmanager: Go is needed to build Alertmanager $version (apt-get install golang or see go.dev)" >&2
    exit 1
fi
mkdir -p "$gobin"
work=$(mktemp -d "$gobin/.alertmanager-XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "building alertmanager $version into $gobin (first run only; a minute or two)"
GOBIN="$work" GOFLAGS="-buildvcs=false" GOTOOLCHAIN=local go install \
    -ldflags "-X github.com/prometheus/common/version.Version=$version" \
    "github.com/prometheus/alertmanager/cmd/alertmanager@v$version"
mv "$work/alertmanager" "$target"

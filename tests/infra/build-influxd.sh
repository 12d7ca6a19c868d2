#!/bin/sh
# Build the real InfluxDB 1.8.10 server the sink tests and bench/influx.py talk to, only when
# missing: `go install` from the Go module proxy into a cached GOBIN (1.8.10 is the last 1.x
# release that builds with pure Go; its /api/v2/write serves influxdb-client). The version is
# stamped with -ldflags so /ping reports 1.8.10 instead of "unknown".
set -eu
gobin="${DB2VTOP_GOBIN:-${XDG_CACHE_HOME:-$HOME/.cache}/db2vtop/gobin}"
if [ -x "$gobin/influxd" ]; then
    exit 0
fi
if ! command -v go >/dev/null 2>&1; then
    echo "build-influxd: Go is needed to build influxd (apt-get install golang or see go.dev)" >&2
    exit 1
fi
mkdir -p "$gobin"
echo "building influxd 1.8.10 into $gobin (first run only; a few minutes)"
GOBIN="$gobin" GOFLAGS="-buildvcs=false" go install \
    -ldflags "-X main.version=1.8.10 -X main.branch=1.8 -X main.commit=v1.8.10" \
    github.com/influxdata/influxdb/cmd/influxd@v1.8.10

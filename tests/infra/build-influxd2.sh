#!/bin/sh
# Build the real InfluxDB 2.7 server the sink tests run against beside 1.8, only when missing.
# `go install ...@v2.7.12` is refused (the module's go.mod has a replace directive), so the module
# is copied out of Go's module cache and built as the main module. Its Flux engine is a Rust
# library: influxdata's pkg-config wrapper (the version influxdb's go.mod pins) builds it with
# cargo when cgo asks for `flux`. Flux's own source is copied beside it (a go.mod replace points
# there) so that two things can be changed before cargo runs: the current stable Rust is used
# (flux asks for 1.72, which is not installable here), and flux-core's `strict` feature, which
# turns every warning of a newer rustc into an error, is off. Everything lands under one build
# directory in ~/.cache/db2vtop/: a second run, or one after a killed first run, resumes there
# (cargo and go keep what they built); the binary is moved into place only once it links.
# No web UI (`-tags assets` downloads it from outside); the tests need none.
set -eu
version=2.7.12
cache="${XDG_CACHE_HOME:-$HOME/.cache}/db2vtop"
gobin="${DB2VTOP_GOBIN:-$cache/gobin}"
target="$gobin/influxd-$version"
[ -x "$target" ] && exit 0
for tool in go cargo; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "build-influxd2: $tool is needed to build influxd $version (Go from go.dev, Rust from rustup)" >&2
        exit 1
    fi
done
work="$cache/influxd2-build"
mkdir -p "$work" "$gobin"
# one build at a time (two `make test` runs may start together); the second finds the binary
exec 9>"$work/.lock"
flock 9
[ -x "$target" ] && exit 0
echo "building influxd $version into $gobin (first run only; about 5 minutes of Rust and Go)"
export GOFLAGS=-buildvcs=false GOTOOLCHAIN=local RUSTUP_TOOLCHAIN=stable

moddir() {  # the module cache directory of module@version (downloaded if needed)
    go mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p'
}

copy() {  # a writable copy of a read-only module directory, made once (a half copy is redone)
    if [ ! -e "$2/.copied" ]; then
        rm -rf "$2"
        mkdir -p "$(dirname "$2")"
        cp -R "$1" "$2"
        chmod -R u+w "$2"
        touch "$2/.copied"
    fi
}

src="$work/influxdb@v$version"
copy "$(cd "$work" && moddir "github.com/influxdata/influxdb/v2@v$version")" "$src"
flux_version=$(cd "$src" && go list -m -f '{{.Version}}' github.com/influxdata/flux)
# the wrapper reads flux's version from this path's shape (.../github.com/influxdata/flux@vX.Y.Z)
flux="$work/github.com/influxdata/flux@$flux_version"
copy "$(cd "$work" && moddir "github.com/influxdata/flux@$flux_version")" "$flux"
sed -i 's/^default = \["strict"\]$/default = []/' "$flux/libflux/flux-core/Cargo.toml"
sed -i 's/^default = \["strict", "cffi"\]$/default = ["cffi"]/' "$flux/libflux/flux/Cargo.toml"
if grep -q '"strict"' "$flux/libflux/flux-core/Cargo.toml" "$flux/libflux/flux/Cargo.toml"; then
    echo "build-influxd2: flux $flux_version's Cargo.toml does not have the expected default features" >&2
    exit 1
fi
(cd "$src" && go mod edit -replace "github.com/influxdata/flux=$flux")
(cd "$src" && go build -o "$work/pkg-config" github.com/influxdata/pkg-config)
(cd "$src" && PKG_CONFIG="$work/pkg-config" go build -trimpath \
    -ldflags "-X main.version=$version -X main.commit=v$version" -o "$work/influxd" ./cmd/influxd)
mv "$work/influxd" "$target"
echo "built $target"

#!/bin/sh
# check_client_go.sh - the Go client (clients/go) with `go vet` and `go test -race`: its tests
# start a private redis-server, dlockd daemons of this build and a TLS relay, on free loopback
# ports. Skipped (77) only when go is missing. It needs no network: the module has no
# dependencies, and GOPROXY=off makes sure of it.
# Run by `make check` from the build directory, with $top_srcdir pointing at the sources; by
# hand: cd BUILDDIR && top_srcdir=SRCDIR SRCDIR/tests/check_client_go.sh
set -u

top=${top_srcdir:-$(dirname "$0")/..}
GO=${GO:-go}
DLOCKD=$(pwd)/daemon/dlockd
export DLOCKD

command -v "$GO" >/dev/null 2>&1 || { echo "$GO not found: the Go client is not tested"; exit 77; }
[ -x "$DLOCKD" ] || { echo "no $DLOCKD: build it first"; exit 1; }

GOPROXY=off GOFLAGS=-buildvcs=false GOTOOLCHAIN=local GOWORK=off
export GOPROXY GOFLAGS GOTOOLCHAIN GOWORK
# The build cache: Go's own ($XDG_CACHE_HOME or $HOME/.cache) when there is one, else a
# temporary one (then the standard library is compiled for -race on every run).
tmp=
if [ -z "$("$GO" env GOCACHE 2>/dev/null)" ] || [ -z "${HOME:-}" ]; then
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlock-go-check.XXXXXX") || exit 1
    GOCACHE=$tmp/cache GOPATH=$tmp/path
    export GOCACHE GOPATH
fi
trap '[ -z "$tmp" ] || { chmod -R u+w "$tmp"; rm -rf "$tmp"; }' EXIT

cd "$top/clients/go" || exit 1
"$GO" vet ./... || exit 1
"$GO" test -race -count=1 -timeout 300s ./...

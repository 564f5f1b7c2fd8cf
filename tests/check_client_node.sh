#!/bin/sh
# check_client_node.sh - the Node.js client (clients/node) with `node --test`: its tests start
# a private redis-server, dlockd daemons of this build and a TLS relay, on free loopback ports.
# Skipped (77) only when node is missing.
# Run by `make check` from the build directory, with $top_srcdir pointing at the sources; by
# hand: cd BUILDDIR && top_srcdir=SRCDIR SRCDIR/tests/check_client_node.sh
set -u

top=${top_srcdir:-$(dirname "$0")/..}
NODE=${NODE:-node}
DLOCKD=$(pwd)/daemon/dlockd
export DLOCKD

command -v "$NODE" >/dev/null 2>&1 || { echo "$NODE not found: the Node.js client is not tested"; exit 77; }
[ -x "$DLOCKD" ] || { echo "no $DLOCKD: build it first"; exit 1; }
exec "$NODE" --test "$top"/clients/node/test/*.test.js

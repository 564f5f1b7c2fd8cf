#!/bin/sh
# check_sentinel_holds.sh - no lock lost on a Sentinel failover: runs tests/faults/sentinel_holds.py
# (1 master, 2 replicas, 3 sentinels, 50 holds, half of them unreplicated, a kill -9 of the master,
# a rival trying every name) with this build's dlockd. Run by `make check` from the build
# directory, with $top_srcdir pointing at the sources.
DLOCKD=$(pwd)/daemon/dlockd
REDIS_SERVER=${REDIS_SERVER:-$(command -v redis-server || echo redis-server)}
export DLOCKD REDIS_SERVER
exec "${PYTHON:-python3}" "$top_srcdir/tests/faults/sentinel_holds.py"

#!/bin/sh
# check_client_python.sh - the unittest suite of the Python client (clients/python) against
# redis-server and the dlockd of this build, which the tests start on free loopback ports.
# Run by `make check` from the build directory, with $top_srcdir pointing at the sources; by
# hand: cd BUILDDIR && top_srcdir=SRCDIR SRCDIR/tests/check_client_python.sh [TEST ...]
# (TEST: a unittest name such as test_failover.Failover.test_sigkill; DLOCK_TEST_KEEP=1 keeps
# the daemons' logs).
set -u

top=${top_srcdir:-$(dirname "$0")/..}
PYTHON=${PYTHON:-python3}
command -v "$PYTHON" >/dev/null 2>&1 || { echo "SKIP: $PYTHON not found"; exit 77; }
DLOCKD=${DLOCKD:-$(pwd)/daemon/dlockd}
REDIS_SERVER=${REDIS_SERVER:-$(command -v redis-server || echo redis-server)}
PYTHONPATH=$(cd "$top/clients/python" && pwd)
PYTHONDONTWRITEBYTECODE=1 # the source tree may be read-only (make distcheck)
export DLOCKD REDIS_SERVER PYTHONPATH PYTHONDONTWRITEBYTECODE

cd "$top/clients/python/tests" || exit 1
if [ "$#" -eq 0 ]; then
    exec "$PYTHON" -m unittest discover -v -s . -p 'test_*.py'
fi
exec "$PYTHON" -m unittest -v "$@"

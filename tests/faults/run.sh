#!/bin/sh
# tests/faults/run.sh short|long [faults.py options] - what `make check-faults` and
# `make check-faults-long` run: the checker's self-test, the reproducers of daemon bugs found
# by fault injection, then every scenario of the tier. Runs them all; exits 1 if any failed.
# Figures go to tests/faults/faults-TIER.json and .md under the current (build) directory.
# Environment: DLOCKD, REDIS_SERVER (paths), FAULTS_PYTHON (default python3), FAULTS_SEED.
tier=${1:?usage: run.sh short|long [faults.py options]}
shift
here=$(dirname "$0")
py=${FAULTS_PYTHON:-python3}
mkdir -p tests/faults
rc=0
echo "== checker self-test"
"$py" "$here/test_checker.py" || rc=1
for r in "$here"/repro_*.py; do
    echo "== reproducer $(basename "$r")"
    "$py" "$r" || { echo "FAIL: $(basename "$r") (a dlockd bug; see the file's comment)"; rc=1; }
done
echo "== fault injection, $tier tier"
"$py" "$here/faults.py" --tier "$tier" --json "tests/faults/faults-$tier.json" \
    --markdown "tests/faults/faults-$tier.md" "$@" || rc=1
[ "$rc" -eq 0 ] && echo "check-faults ($tier): passed" || echo "check-faults ($tier): FAILED"
exit "$rc"

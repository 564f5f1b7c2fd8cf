#!/bin/sh
# tests/valgrind.sh - the long-tier memory check: runs the integration test programs with every
# dlockd they start running under valgrind (memcheck), then sums up valgrind's reports.
#
#   tests/valgrind.sh [-b BUILD-DIR] [TEST ...]
#
# BUILD-DIR (default: the current directory if it has daemon/dlockd, else the source tree) is a
# plain build (not ASan: valgrind and ASan do not mix). TESTS default to every tests/check_*
# program that starts a daemon, except check_hostile (10 000 clients are too much under
# valgrind). The harness starts the daemon from $DLOCKD: this script points it at a wrapper
# that execs valgrind --leak-check=full --errors-for-leak-kinds=definite --error-exitcode=99.
# Exits 1 when valgrind reported an error or a definite leak in any daemon run, else 0. Test
# failures under valgrind (it makes the daemon 20-50 times slower, and some tests time things)
# are listed but do not change the exit status: they are not memory errors. About 15 minutes.
set -u

top=$(cd "$(dirname "$0")/.." && pwd)
build=""
if [ "${1:-}" = "-b" ]; then
    build=$(cd "$2" && pwd) || exit 2
    shift 2
fi
if [ -z "$build" ]; then
    if [ -x ./daemon/dlockd ]; then build=$(pwd); else build=$top; fi
fi
daemon="$build/daemon/dlockd"
[ -x "$daemon" ] || { echo "valgrind.sh: no $daemon (build first)" >&2; exit 2; }
command -v valgrind >/dev/null 2>&1 || { echo "valgrind.sh: valgrind is not installed (apt-get install valgrind)" >&2; exit 2; }
if nm -a "$daemon" 2>/dev/null | grep -q __asan_init; then
    echo "valgrind.sh: $daemon is built with ASan; use a plain build" >&2
    exit 2
fi

tests="$*"
if [ -z "$tests" ]; then
    for t in "$build"/tests/check_*; do
        case $t in *.c | *.sh | *.o | *.log | *.trs | */check_proto | */check_hostile) continue ;; esac
        [ -x "$t" ] && tests="$tests $(basename "$t")"
    done
fi

out=$(mktemp -d "${TMPDIR:-/tmp}/dlockd-valgrind.XXXXXX") || exit 2
cat >"$out/dlockd" <<EOF
#!/bin/sh
exec valgrind --leak-check=full --errors-for-leak-kinds=definite --error-exitcode=99 \\
    --log-file="$out/vg.%p.log" "$daemon" "\$@"
EOF
chmod +x "$out/dlockd"
echo "valgrind.sh: daemon $daemon under valgrind; reports in $out"

failed_tests=""
start=$(date +%s)
for t in $tests; do
    t0=$(date +%s)
    if (cd "$build" && DLOCKD="$out/dlockd" CK_DEFAULT_TIMEOUT=${CK_DEFAULT_TIMEOUT:-600} \
        top_srcdir="$top" "./tests/$t" >"$out/$t.log" 2>&1); then
        echo "valgrind.sh: $t passed ($(( $(date +%s) - t0 )) s)"
    else
        echo "valgrind.sh: $t FAILED under valgrind ($(( $(date +%s) - t0 )) s); log $out/$t.log:"
        grep -E '^[^ ]+:[0-9]+:[FE]:' "$out/$t.log" | head -n 10
        failed_tests="$failed_tests $t"
    fi
done

runs=0 complete=0 errors=0 definite=0 bad=""
for f in "$out"/vg.*.log; do
    [ -f "$f" ] || continue
    runs=$((runs + 1))
    e=$(sed -n 's/.*ERROR SUMMARY: \([0-9,]*\) errors.*/\1/p' "$f" | tr -d , | tail -n 1)
    l=$(sed -n 's/.*definitely lost: \([0-9,]*\) bytes.*/\1/p' "$f" | tr -d , | tail -n 1)
    [ -n "$e" ] || continue # killed with SIGKILL by its test: no summary
    complete=$((complete + 1))
    errors=$((errors + e))
    definite=$((definite + ${l:-0}))
    if [ "$e" -ne 0 ] || [ "${l:-0}" -ne 0 ]; then
        bad="$bad $f"
    fi
done

echo "valgrind.sh: $runs daemon runs ($complete with a summary; the others were SIGKILLed by their test)"
echo "valgrind.sh: $errors errors, $definite bytes definitely lost, in $(( $(date +%s) - start )) s"
[ -z "$failed_tests" ] || echo "valgrind.sh: tests that failed under valgrind:$failed_tests"
if [ -n "$bad" ]; then
    for f in $bad; do
        echo "===== $f"
        cat "$f"
    done
    exit 1
fi
exit 0

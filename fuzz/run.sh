#!/bin/sh
# fuzz/run.sh - runs the regression inputs, then each libFuzzer harness for a while; what
# `make fuzz-run` and CI run. Fails on any crash, leak, timeout, sanitizer report or failed
# harness check, and prints the executions of each fuzzer.
#
#   fuzz/run.sh [SECONDS [MAX_LEN]]
#
# Default: 60 s each; inputs up to 512 bytes for the parser (so that it reaches its million
# executions a minute on a CI core) and 1024 for dispatch.
#
# Environment: FUZZ_SRC (fuzz/ of the source tree: corpus/, regress/, dlockd.dict),
# FUZZ_BIN (where fuzz_proto and fuzz_dispatch are), FUZZ_OUT (artifacts and logs;
# default FUZZ_BIN/out), FUZZERS (default "proto dispatch").
# New corpus entries go to a temporary directory: the seed corpus in the tree is not changed.
set -u

seconds=${1:-60}
max_len=${2:-}
src=${FUZZ_SRC:-$(dirname "$0")}
bin=${FUZZ_BIN:-fuzz}
out=${FUZZ_OUT:-$bin/out}
targets=${FUZZERS:-proto dispatch}
failed=""

mkdir -p "$out" || exit 1
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"

# stat NAME LOG: the value of libFuzzer's final stat NAME, or "?".
stat() {
    v=$(sed -n "s/^stat::$1: *\([0-9]*\).*/\1/p" "$2" | tail -n 1)
    echo "${v:-?}"
}

for t in $targets; do
    fuzzer="$bin/fuzz_$t"
    if [ ! -x "$fuzzer" ]; then
        echo "fuzz: $fuzzer is missing (make fuzz)"
        failed="$failed $t"
        continue
    fi
    # Inputs that once crashed (or still crash: known bugs) run first, once each.
    if [ -d "$src/regress/$t" ] && [ -n "$(ls -A "$src/regress/$t")" ]; then
        if "$fuzzer" -runs=1 "$src"/regress/"$t"/* >"$out/$t-regress.log" 2>&1; then
            echo "fuzz_$t: regression inputs pass ($(ls "$src/regress/$t" | wc -l))"
        else
            echo "fuzz_$t: a regression input FAILS; log $out/$t-regress.log:"
            grep -a -E 'Running:|ERROR|SUMMARY|fuzz_[a-z]+\.c:[0-9]+:|^    #[0-9]+ .*/(daemon|proto|fuzz)/' "$out/$t-regress.log" | head -n 30
            failed="$failed $t-regress"
        fi
    fi
    len=$max_len
    if [ -z "$len" ]; then
        case $t in proto) len=512 ;; *) len=1024 ;; esac
    fi
    work=$(mktemp -d "${TMPDIR:-/tmp}/fuzz-$t.XXXXXX") || exit 1
    log="$out/$t.log"
    start=$(date +%s)
    "$fuzzer" -max_total_time="$seconds" -max_len="$len" -timeout=10 -rss_limit_mb=2048 \
        -dict="$src/dlockd.dict" -print_final_stats=1 -artifact_prefix="$out/$t-" \
        "$work" "$src/corpus/$t" >"$log" 2>&1
    status=$?
    took=$(( $(date +%s) - start ))
    execs=$(stat number_of_executed_units "$log")
    rate=$(stat average_exec_per_sec "$log")
    corpus=$(ls "$work" | wc -l)
    if [ "$status" -eq 0 ]; then
        echo "fuzz_$t: $execs executions in ${took}s ($rate/s), $corpus new corpus inputs, no crash"
    else
        echo "fuzz_$t: FAILED (status $status) after $execs executions in ${took}s; log $log:"
        grep -a -E 'ERROR|SUMMARY|fuzz_[a-z]+\.c:[0-9]+:|^    #[0-9]+ .*/(daemon|proto|fuzz)/|Test unit written' "$log" | head -n 40
        failed="$failed $t"
    fi
    rm -rf "$work"
done

if [ -n "$failed" ]; then
    echo "fuzz: failed:$failed"
    exit 1
fi
echo "fuzz: all passed"

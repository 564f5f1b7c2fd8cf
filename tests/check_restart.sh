#!/bin/sh
# check_restart.sh - `dlock run` jobs ride through the death and the restart of their dlockd: two
# daemons share one redis-server; the one a job is on is killed with SIGKILL, and the job keeps
# its lock (a fenced store sees no other writer until it ends) and exits 0; then the only daemon
# of 20 jobs is stopped with SIGTERM and started again, and every job finishes, none lost.
# Run by `make check` from the build directory, with $top_srcdir pointing at the sources.
set -u

build=$(pwd)
DLOCK=$build/client/dlock
DLOCKD=$build/daemon/dlockd
REDIS=${REDIS_SERVER:-$(command -v redis-server || echo redis-server)}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/check_restart.XXXXXX") || exit 1
pids=""
passed=0
failed=0

ok() { passed=$((passed + 1)); echo "ok - $*"; }
fail() { failed=$((failed + 1)); echo "FAIL - $*"; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }
wait_until() {
    t_end=$(($(now_ms) + $1)); shift
    while ! "$@" >/dev/null 2>&1; do
        [ "$(now_ms)" -ge "$t_end" ] && return 1
        sleep 0.05
    done
}
spawn() { "$@" & pids="$pids $!"; }

cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    if [ "$failed" -eq 0 ] && [ -z "${KEEP:-}" ]; then rm -rf "$tmp"; else echo "logs kept in $tmp"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

spawn "$REDIS" --port 0 --unixsocket "$tmp/redis.sock" --save "" --appendonly no --dir "$tmp" >"$tmp/redis.log" 2>&1
wait_until 5000 test -S "$tmp/redis.sock" || { echo "redis-server did not start"; exit 1; }

# daemon N: starts dlockd N on $tmp/dN.sock; its pid in $daemon_pid. A client trusts its holds
# for about 2/3 of lock-lease without an answer (libdlock): 6 s leave room for a restart.
daemon() {
    "$DLOCKD" --listen "unix:$tmp/d$1.sock" --redis "unix:$tmp/redis.sock" --lock-lease 6s \
        --log-level debug >>"$tmp/d$1.log" 2>&1 &
    daemon_pid=$!
    pids="$pids $daemon_pid"
    wait_until 5000 env DLOCK_ADDR="unix:$tmp/d$1.sock" "$DLOCK" ping || { echo "dlockd $1 did not start"; exit 1; }
}
daemon 1
D1=$daemon_pid
daemon 2
D2=$daemon_pid

# ---------------------------------------------------------------- kill -9 under a job

# The job writes its token to the store every 100 ms for 5 s; a second job waits for the same
# lock through the other daemon and writes once. The store must see the first job's lines, all
# with one token, then the second's: nobody else wrote while the first believed it held the lock.
store=$tmp/store
: >"$store"
DLOCK_ADDR="unix:$tmp/d1.sock,unix:$tmp/d2.sock" "$DLOCK" --ttl 10s --name first run -w 5s fenced -- \
    sh -c 'i=0; while [ $i -lt 50 ]; do echo "first $DLOCK_TOKEN" >>"$0"; sleep 0.1; i=$((i + 1)); done' \
    "$store" >"$tmp/first.out" 2>"$tmp/first.err" &
first=$!
wait_until 3000 grep -q first "$store" || fail "the first job did not start"
DLOCK_ADDR="unix:$tmp/d2.sock" "$DLOCK" --name second run -w 30s fenced -- \
    sh -c 'echo "second $DLOCK_TOKEN" >>"$0"' "$store" >"$tmp/second.out" 2>"$tmp/second.err" &
second=$!
sleep 0.5
kill -9 "$D1"
wait "$first"; st=$?
[ "$st" -eq 0 ] && ok "the job on the killed daemon finished (status 0)" ||
    fail "the job on the killed daemon: status $st: $(cat "$tmp/first.err")"
wait "$second"; st=$?
[ "$st" -eq 0 ] && ok "the waiter on the other daemon got the lock after it (status 0)" ||
    fail "the waiter: status $st: $(cat "$tmp/second.err")"
lines=$(grep -c '^first ' "$store")
tokens=$(grep '^first ' "$store" | sort -u | wc -l)
last=$(tail -n 1 "$store")
if [ "$lines" -eq 50 ] && [ "$tokens" -eq 1 ] && [ "${last%% *}" = second ]; then
    ok "the store saw 50 writes under one token, then the next holder's"
else
    fail "store: $lines lines of the first job, $tokens tokens, last line '$last'"
fi
t1=$(grep '^first ' "$store" | head -n 1 | cut -d' ' -f2)
t2=$(grep '^second ' "$store" | cut -d' ' -f2)
[ -n "$t2" ] && [ "$t2" -gt "$t1" ] && ok "the next token is higher" || fail "tokens $t1 then '$t2'"

# ---------------------------------------------------------------- SIGTERM and restart under 20 jobs

i=0
jobs=""
while [ $i -lt 20 ]; do
    DLOCK_ADDR="unix:$tmp/d2.sock" "$DLOCK" --ttl 10s --name "job$i" run -w 5s "r$i" -- sleep 3 \
        >"$tmp/job$i.out" 2>"$tmp/job$i.err" &
    jobs="$jobs $!"
    i=$((i + 1))
done
sleep 1
kill -TERM "$D2"
wait "$D2" 2>/dev/null
sleep 0.3
daemon 2
n=0
lost=0
for j in $jobs; do
    wait "$j" && n=$((n + 1))
done
lost=$(cat "$tmp"/job*.err | grep -c 'lost the lock')
if [ "$n" -eq 20 ] && [ "$lost" -eq 0 ]; then
    ok "20 jobs rode through SIGTERM and a restart of their only daemon"
else
    fail "$n of 20 jobs finished with status 0, $lost lost: $(cat "$tmp"/job*.err | sort | uniq -c | head -5)"
fi

echo "check_restart: $passed passed, $failed failed"
[ "$failed" -eq 0 ]

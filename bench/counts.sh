#!/usr/bin/env bash
# bench/counts.sh - what `make bench-counts` runs: the figures of the uncontended LOCK+UNLOCK
# pair that a noisy machine does not change, per pair and per connection count: dlockd's
# instructions (valgrind --tool=callgrind), its system calls (strace -c -f) and Redis
# commands and script calls (INFO commandstats), at log-level notice and info. Each run
# starts a private redis-server and dlockd on free loopback ports and drives them with
# dlock-bench (sessions opened with HELLO). Each figure is a difference between a run of 1 s and
# one of COUNTS_SECONDS, divided by the difference in pairs: what dlockd costs per pair once it
# runs, without its start, the opening of the connections and its exit, which a run of a few
# thousand pairs would otherwise spread over them. Then Redis's instructions per pair, for dlockd
# and for the recipe (redis-server under callgrind). Prints two tables; exits non-zero when a
# tool is missing or a run failed.
#
# Environment (set by bench/Makefile.inc): BENCH_BIN, DLOCKD_BIN, REDIS_SERVER.
# COUNTS_CONNS: the connection counts (default "1 50"); COUNTS_SECONDS: seconds per run
# (default 5; under callgrind dlockd runs about 50 times slower, so fewer pairs are counted).
set -u

BENCH_BIN=${BENCH_BIN:-bench/dlock-bench}
DLOCKD_BIN=${DLOCKD_BIN:-daemon/dlockd}
REDIS_SERVER=${REDIS_SERVER:-$(command -v redis-server || true)}
conns_list=${COUNTS_CONNS:-1 50}
secs=${COUNTS_SECONDS:-5}

say() { printf 'bench-counts: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

for t in valgrind strace redis-cli; do
    command -v "$t" >/dev/null || die "no $t (apt-get install valgrind strace redis-tools)"
done
[ -x "$BENCH_BIN" ] || die "no $BENCH_BIN (make bench/dlock-bench)"
[ -x "$DLOCKD_BIN" ] || die "no $DLOCKD_BIN"
[ -n "$REDIS_SERVER" ] && [ -x "$REDIS_SERVER" ] || die "no redis-server"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlock-counts.XXXXXX") || die "mktemp failed"
rpid=
dpid=
cleanup() {
    [ -n "$dpid" ] && kill -9 "$dpid" 2>/dev/null
    [ -n "$rpid" ] && kill -9 "$rpid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# stat NAME: the calls of Redis command NAME so far (INFO commandstats).
stat() {
    redis-cli -p "$rport" info commandstats | tr -d '\r' |
        sed -n "s/^cmdstat_$1:calls=\([0-9]*\).*/\1/p" | awk '{ n += $1 } END { print n + 0 }'
}

# run TOOL LEVEL CONNS SECS [TARGET]: one run of dlockd under TOOL (callgrind or strace), or of
# redis-server under callgrind (TOOL redis, driven by TARGET dlockd or recipe), at log-level
# LEVEL with CONNS connections for SECS seconds; prints "pairs figure cmds scripts".
run() {
    local tool=$1 level=$2 conns=$3 run_secs=$4 target=${5:-dlockd} out=$tmp/$1.$2.$3.$4.${5:-dlockd}
    local tpid pairs figure before_all before_eval all eval
    rport=$(free_port)
    dport=$(free_port)
    if [ "$tool" = redis ]; then
        valgrind -q --tool=callgrind --callgrind-out-file="$out.cg" "$REDIS_SERVER" --port "$rport" \
            --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" --logfile "$tmp/redis.log" & rpid=$!
    else
        "$REDIS_SERVER" --port "$rport" --bind 127.0.0.1 --save '' --appendonly no \
            --dir "$tmp" --logfile "$tmp/redis.log" & rpid=$!
    fi
    for _ in $(seq 150); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.1; done
    case $tool in
    callgrind) valgrind -q --tool=callgrind --callgrind-out-file="$out.cg" "$DLOCKD_BIN" \
        --listen "127.0.0.1:$dport" --redis "127.0.0.1:$rport" --log-level "$level" 2>"$out.log" & ;;
    strace) strace -f -c -o "$out.st" "$DLOCKD_BIN" \
        --listen "127.0.0.1:$dport" --redis "127.0.0.1:$rport" --log-level "$level" 2>"$out.log" & ;;
    redis) if [ "$target" = dlockd ]; then
        "$DLOCKD_BIN" --listen "127.0.0.1:$dport" --redis "127.0.0.1:$rport" --log-level "$level" 2>"$out.log" &
    fi ;;
    esac
    tpid=
    if [ "$target" = dlockd ]; then
        tpid=$!
        for _ in $(seq 150); do (exec 3<>"/dev/tcp/127.0.0.1/$dport") 2>/dev/null && break; sleep 0.2; done
    fi
    sleep 1
    # valgrind runs dlockd in its own process; strace runs it as its child
    if [ "$tool" = strace ]; then dpid=$(pgrep -P "$tpid" | head -1); else dpid=$tpid; fi
    before_all=$(redis-cli -p "$rport" info commandstats | tr -d '\r' |
        sed -n 's/^cmdstat_[^:]*:calls=\([0-9]*\).*/\1/p' | awk '{ n += $1 } END { print n + 0 }')
    before_eval=$(( $(stat evalsha) + $(stat fcall) + $(stat eval) ))
    "$BENCH_BIN" --scenario pairs --target "$target" --dlockd "127.0.0.1:$dport" --redis "127.0.0.1:$rport" \
        --conns "$conns" --duration "$run_secs" --warmup 0 >"$out.res" 2>&1 || { cat "$out.res" >&2; return 1; }
    all=$(redis-cli -p "$rport" info commandstats | tr -d '\r' |
        sed -n 's/^cmdstat_[^:]*:calls=\([0-9]*\).*/\1/p' | awk '{ n += $1 } END { print n + 0 }')
    eval=$(( $(stat evalsha) + $(stat fcall) + $(stat eval) ))
    if [ -n "$tpid" ]; then
        kill -TERM "$dpid" 2>/dev/null
        wait "$tpid" 2>/dev/null
    fi
    dpid=
    kill "$rpid" 2>/dev/null
    wait "$rpid" 2>/dev/null
    rpid=
    pairs=$(grep -o ' n=[0-9]*' "$out.res" | head -1 | cut -d= -f2)
    [ -n "$pairs" ] && [ "$pairs" -gt 0 ] || { say "no pairs in $out.res"; return 1; }
    case $tool in
    callgrind | redis) figure=$(callgrind_annotate "$out.cg" 2>/dev/null | sed -n 's/^ *\([0-9,]*\) .*PROGRAM TOTALS.*/\1/p' | tr -d ,) ;;
    strace) figure=$(awk '$NF == "total" { print $(NF-2) }' "$out.st") ;;
    esac
    [ -n "$figure" ] || { say "no figure from $tool"; return 1; }
    echo "$pairs $figure $((all - before_all)) $((eval - before_eval))"
}

printf '| conns | log-level | pairs (callgrind, more) | instructions/pair | pairs (strace, more) | system calls/pair | Redis commands/pair | script calls/pair |\n'
printf '|---|---|---|---|---|---|---|---|\n'
status=0
for conns in $conns_list; do
    for level in notice info; do
        cg0=$(run callgrind "$level" "$conns" 1) && cg=$(run callgrind "$level" "$conns" "$secs") &&
            st0=$(run strace "$level" "$conns" 1) && st=$(run strace "$level" "$conns" "$secs") || { status=1; continue; }
        read -r cp0 ci0 _ _ <<<"$cg0"
        read -r cp ci _ _ <<<"$cg"
        read -r sp0 sc0 cmds0 scripts0 <<<"$st0"
        read -r sp sc cmds scripts <<<"$st"
        [ "$cp" -gt "$cp0" ] && [ "$sp" -gt "$sp0" ] || { say "$conns conns, $level: no more pairs in $secs s than in 1 s"; status=1; continue; }
        awk -v c="$conns" -v l="$level" -v cp=$((cp - cp0)) -v ci=$((ci - ci0)) -v sp=$((sp - sp0)) -v sc=$((sc - sc0)) \
            -v cm=$((cmds - cmds0)) -v sr=$((scripts - scripts0)) \
            'BEGIN { printf "| %d | %s | %d | %.1fk | %d | %.1f | %.1f | %.2f |\n", c, l, cp, ci / cp / 1000, sp, sc / sp, cm / sp, sr / sp }'
    done
done

# Redis's side: its instructions per pair, under callgrind, for dlockd (log-level notice) and for
# the recipe in the same run. Redis is the slow process then: dlockd's batches are as large as
# they get, so this is what the scripts cost per pair, not their fixed cost per call.
printf '\n| conns | Redis instructions/pair, dlockd | the recipe | dlockd / recipe | dlockd script calls/pair |\n'
printf '|---|---|---|---|---|\n'
for conns in $conns_list; do
    rd0=$(run redis notice "$conns" 1 dlockd) && rd=$(run redis notice "$conns" "$secs" dlockd) &&
        rr0=$(run redis notice "$conns" 1 recipe) && rr=$(run redis notice "$conns" "$secs" recipe) ||
        { status=1; continue; }
    read -r dp0 di0 _ ds0 <<<"$rd0"
    read -r dp di _ ds <<<"$rd"
    read -r rp0 ri0 _ _ <<<"$rr0"
    read -r rp ri _ _ <<<"$rr"
    [ "$dp" -gt "$dp0" ] && [ "$rp" -gt "$rp0" ] || { say "$conns conns: no more pairs under callgrind in $secs s"; status=1; continue; }
    awk -v c="$conns" -v dp=$((dp - dp0)) -v di=$((di - di0)) -v ds=$((ds - ds0)) -v rp=$((rp - rp0)) -v ri=$((ri - ri0)) \
        'BEGIN { printf "| %d | %.1fk | %.1fk | %.2f | %.3f |\n", c, di / dp / 1000, ri / rp / 1000, (di / dp) / (ri / rp), ds / dp }'
done
exit $status

#!/usr/bin/env bash
# bench/run.sh - what `make bench`, `make bench-pairs` and `make bench-smoke` run: starts a
# private redis-server and dlockd on free loopback ports and on unix sockets, runs every
# scenario against dlockd (A) and against direct Redis (B, the same Lua library over FCALL),
# alternating A B A B, the uncontended pairs also against the recipe (C, bench/recipe.c),
# then prints one table of medians and ratios and, when gnuplot is there, plots latency
# against load.
#
# The uncontended pairs run, in every round and at every connection count, A at log-level
# notice over TCP, A at log-level info (label variant=info: the audit log on), A with its
# clients on dlockd's unix socket (variant=unix; dlockd to Redis stays TCP), B, C, and C on
# Redis's unix socket (variant=unix). The smoke run does the variants at 50 connections only.
#
#   bench/run.sh full|pairs|smoke     pairs: the uncontended pairs of a full run, nothing else
#
# Environment (set by bench/Makefile.inc): BENCH_BIN, DLOCKD_BIN, REDIS_SERVER, BENCH_SRCDIR.
# BENCH_OUT: where results go (default bench/out). BENCH_ROUNDS: rounds of the uncontended
# pairs (full and pairs: 5; 2 rounds of pairs take about 2.5 minutes). Exits non-zero when a
# run crashed or reported errors, or a server died; never because a target was missed.
set -u

mode=${1:-full}
case $mode in full|pairs|smoke) ;; *) echo "usage: $0 full|pairs|smoke" >&2; exit 2 ;; esac

BENCH_BIN=${BENCH_BIN:-bench/dlock-bench}
DLOCKD_BIN=${DLOCKD_BIN:-daemon/dlockd}
REDIS_SERVER=${REDIS_SERVER:-$(command -v redis-server || true)}
BENCH_SRCDIR=${BENCH_SRCDIR:-$(dirname "$0")}
out=${BENCH_OUT:-bench/out}

say() { printf 'bench: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

[ -x "$BENCH_BIN" ] || die "no $BENCH_BIN (make bench/dlock-bench)"
[ -x "$DLOCKD_BIN" ] || die "no $DLOCKD_BIN"
[ -n "$REDIS_SERVER" ] && [ -x "$REDIS_SERVER" ] || die "no redis-server (apt-get install redis-server)"

mkdir -p "$out" || die "cannot create $out"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlock-bench.XXXXXX") || die "mktemp failed"
results=$out/results.txt
log=$out/bench.log
: > "$results"
: > "$log"

# 10 000 sessions need 10 000 descriptors in each of dlock-bench, dlockd and redis-server.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
nofile=$(ulimit -n)

rpid= dpid=
cleanup() {
    [ -n "$dpid" ] && kill "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null
    [ -n "$rpid" ] && kill "$rpid" 2>/dev/null && wait "$rpid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# A port nobody listens on, below the ephemeral range (where outgoing connections may hold it).
eph_lo=$(awk '{ print $1 }' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
free_port() {
    local p
    for _ in $(seq 50); do
        p=$((10000 + RANDOM % (eph_lo - 10000)))
        port_free "$p" && { echo "$p"; return 0; }
    done
    return 1
}
wait_port() { # PORT PID
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        kill -0 "$2" 2>/dev/null || return 1
        sleep 0.05
    done
    return 1
}
# One inline Redis command; prints the first reply line.
rcmd() {
    local line
    exec 3<>"/dev/tcp/127.0.0.1/$rport" || return 1
    printf '%s\r\n' "$*" >&3
    IFS= read -r -t 30 line <&3
    exec 3>&-
    printf '%s\n' "${line%$'\r'}"
}

maxclients=$((nofile > 12100 ? nofile - 100 : nofile - 64))
# dlockd's lock-lease: the default 30s (renewal every 10s); the smoke run renews every second
# so that its short idle window still sees renewals
if [ "$mode" = smoke ]; then lease_ms=3000; else lease_ms=30000; fi
rsock=$tmp/redis.sock dsock=$tmp/dlockd.sock
start_redis() {
    rport=$(free_port) || die "no free port"
    "$REDIS_SERVER" --port "$rport" --bind 127.0.0.1 --unixsocket "$rsock" --unixsocketperm 700 --save '' \
        --appendonly no --dir "$tmp" --maxclients "$maxclients" --logfile "$tmp/redis.log" &
    rpid=$!
    wait_port "$rport" "$rpid" && return 0
    kill "$rpid" 2>/dev/null
    wait "$rpid" 2>/dev/null
    rpid=
    return 1
}
# start_dlockd [LOG-LEVEL]: a fresh dlockd (log-level notice unless told), on the unix socket and
# a port; a port taken meanwhile is replaced by another one. The unix socket is bound first, so
# it is there once the port answers.
start_dlockd() {
    if [ -n "$dpid" ]; then
        kill "$dpid" 2>/dev/null
        wait "$dpid" 2>/dev/null
        dpid=
    fi
    for _ in 1 2 3 4 5; do
        "$DLOCKD_BIN" --listen "unix:$dsock" --listen "127.0.0.1:$dport" --redis "127.0.0.1:$rport" \
            --maxclients 20000 --lock-lease "$lease_ms" --log-level "${1:-notice}" >> "$tmp/dlockd.log" 2>&1 &
        dpid=$!
        wait_port "$dport" "$dpid" && return 0
        kill "$dpid" 2>/dev/null
        wait "$dpid" 2>/dev/null
        dpid=
        dport=$(free_port) || break
    done
    tail -5 "$tmp/dlockd.log" >&2
    die "dlockd did not start"
}
for _ in 1 2 3 4 5; do start_redis && break; done
[ -n "$rpid" ] || { cat "$tmp/redis.log" >&2; die "redis-server did not start"; }
dport=$(free_port) || die "no free port"
start_dlockd

# Other people's load on a shared machine skews a run: before each run of a full or pairs
# benchmark wait (up to 10 s, at most 30 s in all) until the machine, with our servers idle,
# uses less than a quarter of one core. The smoke run does not wait.
hz=$(getconf CLK_TCK 2>/dev/null || echo 100)
busy_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $9; exit }' /proc/stat; }
quiet_waited=0
quiet() {
    local a b tries=0
    [ "$mode" = smoke ] && return 0
    while [ "$tries" -lt 33 ] && [ "$quiet_waited" -lt 100 ]; do
        a=$(busy_ticks)
        sleep 0.3
        b=$(busy_ticks)
        [ $(((b - a) * 100)) -lt $((hz * 30 / 4)) ] && return 0
        tries=$((tries + 1))
        quiet_waited=$((quiet_waited + 1))
    done
    [ "$tries" -gt 0 ] && echo "### waited $((tries * 3 / 10)) s for a quiet machine, gave up" >> "$log"
    return 0
}

failures=0
runs=0
reruns=0
rerun_secs=0
# run_once TARGET SCENARIO LABEL [dlock-bench options]: one measured run; its RESULT line in $line.
# variant=info in LABEL runs dlockd at log-level info; variant=unix puts the clients on the unix
# socket of dlockd, or of Redis for the other targets.
run_once() {
    local target=$1 sc=$2 label=$3 rc pids level=notice dl rd
    shift 3
    case " $label " in *" variant=info "*) level=info ;; esac
    rcmd FLUSHALL > /dev/null || die "Redis is gone"
    if [ "$target" = dlockd ]; then
        start_dlockd "$level" # a fresh daemon: no sessions or allocator state left from the last run
        pids="--dlockd-pid $dpid --redis-pid $rpid"
    else
        pids="--redis-pid $rpid"
    fi
    dl=127.0.0.1:$dport rd=127.0.0.1:$rport
    case " $label " in
    *" variant=unix "*) if [ "$target" = dlockd ]; then dl=unix:$dsock; else rd=unix:$rsock; fi ;;
    esac
    quiet
    runs=$((runs + 1))
    printf 'bench: [%d] %-7s %-6s %s\n' "$runs" "$sc" "$target" "$label" >&2
    echo "### $target $sc $label $*" >> "$log"
    # shellcheck disable=SC2086 # pids is a list of options
    line=$(timeout 300 "$BENCH_BIN" --scenario "$sc" --target "$target" --dlockd "$dl" --redis "$rd" $pids \
        --label "$label" "$@" 2>> "$log")
    rc=$?
    if [ "$rc" -ne 0 ]; then
        failures=$((failures + 1))
        say "run failed (status $rc): $target $sc $label; last lines of $log:"
        tail -5 "$log" >&2
    fi
    if [ "$target" = dlockd ] && ! kill -0 "$dpid" 2>/dev/null; then
        failures=$((failures + 1))
        say "dlockd died during: $sc $label"
        tail -20 "$tmp/dlockd.log" >&2
        dpid=
        start_dlockd
    fi
    kill -0 "$rpid" 2>/dev/null || die "redis-server died during: $target $sc $label"
}

# run TARGET SCENARIO LABEL [options]: run_once, appended to $results. In a full or pairs run, a run
# during which other processes took more than a quarter of a core is run once more, while
# the re-runs have taken less than 90 s; the RESULT line says rerun=1.
run() {
    local t0 other
    run_once "$@"
    other=$(printf '%s\n' "$line" | sed -n 's/.* other_cpu=\([0-9.]*\).*/\1/p')
    if [ "$mode" != smoke ] && [ -n "$other" ] && [ "$rerun_secs" -lt 90 ] &&
        awk -v o="$other" 'BEGIN { exit !(o > 25) }'; then
        echo "### other processes took ${other}% of a core: running it again" >> "$log"
        t0=$(date +%s)
        run_once "$@"
        [ -n "$line" ] && line="$line rerun=1"
        reruns=$((reruns + 1))
        rerun_secs=$((rerun_secs + $(date +%s) - t0))
    fi
    [ -n "$line" ] && echo "$line" >> "$results"
}

# median_of METRIC FILTER...: the median of a metric over the result lines without a variant
# matching all filters.
median_of() {
    local metric=$1
    shift
    local f
    f=$(grep -v ' variant=' "$results")
    for k in "$@"; do f=$(printf '%s\n' "$f" | grep -- " $k\( \|\$\)"); done
    printf '%s\n' "$f" | sed -n "s/.* $metric=\([0-9.]*\).*/\1/p" | sort -n |
        awk '{ v[NR] = $1 } END { if (NR == 0) print 0; else if (NR % 2) print v[(NR + 1) / 2];
                                  else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

if [ "$mode" != smoke ]; then
    rounds=${BENCH_ROUNDS:-5}; pairs_conns="1 10 50 200"; variant_conns=$pairs_conns; pairs_secs=2; warm=0.5
    hand_n=10; hand_secs=5; hand_long=1000; hand_rounds=2
    idle_sessions=10000; idle_locks=10; idle_secs=10; idle_rounds=2 # one renewal period
    scale_sessions=10000; scale_secs=5; scale_hb=3333; scale_rounds=2
    mixed_secs=3; mixed_conns=200; mixed_names=100; mixed_rounds=3
    sweep_fracs="0.1 0.25 0.5 0.7 0.85 1.0 1.15"; sweep_secs=1.5; sweep_rounds=2
else
    rounds=1; pairs_conns="1 50"; variant_conns=50; pairs_secs=1; warm=0.2
    hand_n=4; hand_secs=1.5; hand_long=300; hand_rounds=1
    idle_sessions=500; idle_locks=4; idle_secs=2; idle_rounds=1
    scale_sessions=500; scale_secs=1; scale_hb=500; scale_rounds=1
    mixed_secs=1; mixed_conns=50; mixed_names=20; mixed_rounds=1
    sweep_fracs="0.5"; sweep_secs=1; sweep_rounds=1
fi
if [ "$mode" = pairs ]; then
    hand_rounds=0; idle_rounds=0; scale_rounds=0; mixed_rounds=0; sweep_rounds=0
fi
start=$(date +%s)

say "$mode run: redis-server pid $rpid port $rport, dlockd port $dport, RLIMIT_NOFILE $nofile, results in $out"

# 1. uncontended pairs, closed loop: dlockd, its own scripts, and the recipe users write instead;
# and the variants: dlockd at log-level info, dlockd and the recipe with clients on unix sockets
# pair_runs ROUND CONNS TARGET[:VARIANT]...
pair_runs() {
    local r=$1 c=$2 t label
    shift 2
    for t in "$@"; do
        label="round=$r"
        [ "$t" != "${t#*:}" ] && label="$label variant=${t#*:}"
        run "${t%%:*}" pairs "$label" --conns "$c" --duration "$pairs_secs" --warmup "$warm"
    done
}
for r in $(seq "$rounds"); do
    for c in $pairs_conns; do
        case " $variant_conns " in
        *" $c "*) pair_runs "$r" "$c" dlockd dlockd:info dlockd:unix redis recipe recipe:unix ;;
        *) pair_runs "$r" "$c" dlockd redis recipe ;;
        esac
    done
done

# latency against load: open loop at fractions of the best closed-loop rate at 50 connections
best=$(awk -v a="$(median_of pairs_s conns=50 rate=0 target=dlockd)" \
           -v b="$(median_of pairs_s conns=50 rate=0 target=redis)" 'BEGIN { print (a > b ? a : b) }')
if awk -v b="$best" 'BEGIN { exit !(b > 0) }'; then
    for r in $(seq "$sweep_rounds"); do
        for f in $sweep_fracs; do
            rate=$(awk -v b="$best" -v f="$f" 'BEGIN { printf "%d", b * f }')
            for t in dlockd redis; do
                run "$t" pairs "round=$r sweep=1" --conns 50 --rate "$rate" --duration "$sweep_secs" --warmup "$warm"
            done
        done
    done
fi

# 2. contended handoff: dlockd's FIFO queue against the two spin recipes
for r in $(seq "$hand_rounds"); do
    run dlockd handoff "round=$r recipe=queue" --conns "$hand_n" --duration "$hand_secs" --warmup "$warm" \
        --hold 1 --long-hold "$hand_long"
    run redis handoff "round=$r recipe=spin100" --conns "$hand_n" --duration "$hand_secs" --warmup "$warm" \
        --hold 1 --sleep 100 --long-hold "$hand_long"
    run redis handoff "round=$r recipe=spin1" --conns "$hand_n" --duration "$hand_secs" --warmup "$warm" \
        --hold 1 --sleep 1 --long-hold "$hand_long"
done

# 3. idle holds: sessions holding locks, nothing but heartbeats (dlockd) or renewals (direct)
for r in $(seq "$idle_rounds"); do
    for t in dlockd redis; do
        run "$t" idle "round=$r" --sessions "$idle_sessions" --locks "$idle_locks" --duration "$idle_secs" \
            --warmup 1 --heartbeat 3333 --renew $((lease_ms / 3))
    done
done

# 4. connection scale: heartbeating sessions and one probe client
for r in $(seq "$scale_rounds"); do
    for t in dlockd redis; do
        run "$t" scale "round=$r" --sessions "$scale_sessions" --heartbeat "$scale_hb" --duration "$scale_secs" \
            --warmup "$warm"
    done
done

# 5. mixed shared/exclusive on a few names
for r in $(seq "$mixed_rounds"); do
    for t in dlockd redis; do
        run "$t" mixed "round=$r" --conns "$mixed_conns" --names "$mixed_names" --shared-pct 80 --sleep 1 \
            --duration "$mixed_secs" --warmup "$warm"
    done
done

elapsed=$(($(date +%s) - start))

# the machine and the versions, for BENCHMARKS.md
{
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "cores: $(nproc), model: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
    echo "kernel: $(uname -sr)"
    echo "redis-server: $("$REDIS_SERVER" --version | head -1)"
    echo "dlockd: $("$DLOCKD_BIN" --version 2>&1 | head -1)"
    echo "libevent: $(pkg-config --modversion libevent 2>/dev/null || echo '?'), hiredis: $(pkg-config --modversion hiredis 2>/dev/null || echo '?')"
    echo "cc: $(${CC:-cc} --version 2>/dev/null | head -1)"
    echo "commit: $(git -C "$BENCH_SRCDIR" describe --always --dirty 2>/dev/null || echo '?')"
    echo "mode: $mode, $runs runs ($reruns re-run for outside load) in ${elapsed}s, $((quiet_waited * 3 / 10))s of it waiting for a quiet machine; $failures failed"
} > "$out/env.txt"

"$BENCH_BIN" report "$results" > "$out/table.md"
"$BENCH_BIN" report --sweep "$results" > "$out/sweep.dat"
echo
cat "$out/env.txt"
echo
cat "$out/table.md"
if command -v gnuplot > /dev/null 2>&1 && [ "$(wc -l < "$out/sweep.dat")" -gt 1 ]; then
    if gnuplot -e "data='$out/sweep.dat'; out='$out/latency.png'" "$BENCH_SRCDIR/plot.gp" 2>> "$log"; then
        echo "plot: $out/latency.png"
    else
        say "gnuplot failed; see $log"
    fi
else
    echo "plot: skipped (no gnuplot, or no open-loop points); data in $out/sweep.dat"
fi

if [ "$failures" -ne 0 ]; then
    say "$failures run(s) failed; see $log"
    exit 1
fi
exit 0

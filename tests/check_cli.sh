#!/bin/sh
# check_cli.sh - tests of the dlock command against a private redis-server and dlockd (on unix
# sockets), of the man pages, and of `make install DESTDIR=...` with an outside program built
# against the installed library through pkg-config.
# Run by `make check` from the build directory, with $top_srcdir pointing at the sources; by
# hand: cd BUILDDIR && top_srcdir=SRCDIR SRCDIR/tests/check_cli.sh
set -u

build=$(pwd)
top=${top_srcdir:-$(dirname "$0")/..}
DLOCK=$build/client/dlock
DLOCKD=$build/daemon/dlockd
REDIS=${REDIS_SERVER:-$(command -v redis-server || echo redis-server)}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/check_cli.XXXXXX") || exit 1
pids=""
passed=0
failed=0

ok() { passed=$((passed + 1)); echo "ok - $*"; }
fail() { failed=$((failed + 1)); echo "FAIL - $*"; }
# check DESCRIPTION COMMAND...: the command succeeds.
check() { d=$1; shift; if "$@"; then ok "$d"; else fail "$d"; fi; }
# status_is DESCRIPTION WANT GOT
status_is() { if [ "$3" -eq "$2" ]; then ok "$1 (status $3)"; else fail "$1: status $3, expected $2"; fi; }
# matches STRING REGEX: expr's anchored match.
matches() { expr "$1" : "$2" >/dev/null; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }
# wait_until TIMEOUT_MS COMMAND...: polls until the command succeeds. 0 or 1.
wait_until() {
    t_end=$(($(now_ms) + $1)); shift
    while ! "$@" >/dev/null 2>&1; do
        [ "$(now_ms)" -ge "$t_end" ] && return 1
        sleep 0.05
    done
}
spawn() { "$@" & pids="$pids $!"; }
alive() { kill -0 "$1" 2>/dev/null; }

cleanup() {
    for p in $pids; do kill -CONT "$p" 2>/dev/null; kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    if [ "$failed" -eq 0 ] && [ -z "${KEEP:-}" ]; then rm -rf "$tmp"; else echo "logs kept in $tmp"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# ---------------------------------------------------------------- servers

spawn "$REDIS" --port 0 --unixsocket "$tmp/redis.sock" --save "" --appendonly no --dir "$tmp" >"$tmp/redis.log" 2>&1
wait_until 5000 test -S "$tmp/redis.sock" || { echo "redis-server did not start"; cat "$tmp/redis.log"; exit 1; }
spawn "$DLOCKD" --listen "unix:$tmp/dlockd.sock" --redis "unix:$tmp/redis.sock" --session-ttl-min 500ms \
    --adminpass cli-b0ss --log-level debug >"$tmp/dlockd.log" 2>&1
DLOCKD_PID=$!
export DLOCK_ADDR="unix:$tmp/dlockd.sock"
unset DLOCK_PASSWORD DLOCK_ADMINPASS
wait_until 5000 "$DLOCK" ping || { echo "dlockd did not start"; tail "$tmp/dlockd.log"; exit 1; }

keys0=$(sed -n 's/^ *K("\([a-z-]*\)", *[A-Z_]*, .*/\1/p' "$top/daemon/core/config.h")
# held NAME: someone holds NAME.
held() { "$DLOCK" status "$1" | grep -q ' [1-9][0-9]* holders\?,'; }
# unheld NAME...: nobody holds any of them.
unheld() { for n in "$@"; do held "$n" && return 1; done; return 0; }
waiting() { "$DLOCK" --json status "$1" | grep -q '"waiters":[1-9]'; }

# ---------------------------------------------------------------- ping, info, status

out=$("$DLOCK" ping); st=$?
status_is "ping" 0 $st
check "ping prints PONG and the backend state" matches "$out" "PONG [0-9.]* ms, backend up at unix:$tmp/redis.sock\$"
check "ping --json" sh -c "\"$DLOCK\" --json ping | grep -q '^{\"ok\":true,\"rtt_ms\":[0-9.]*,\"backend\":\"up\",\"backend_addr\":\"unix:[^\"]*\",\"backend_error\":\"\",\"gated_until\":\"\"}\$'"
check "info for people" sh -c "\"$DLOCK\" info | grep -q '^version: '"
check "info --json" sh -c "\"$DLOCK\" --json info | grep -q '^{.*\"version\"'"
check "status of an unused name" sh -c "\"$DLOCK\" status nothing-here | grep -qx 'nothing-here: not in use'"
check "status --json of an unused name" sh -c "\"$DLOCK\" status --json nothing-here | grep -q '\"type\":null'"
"$DLOCK" --addr "unix:$tmp/nobody.sock" ping 2>"$tmp/err"; st=$?
status_is "ping without a server is a temporary failure" 75 $st
check "it says why" grep -q "cannot connect to dlockd: unix:$tmp/nobody.sock: no such socket" "$tmp/err"
"$DLOCK" --addr "nohost.invalid:7411" status x 2>"$tmp/err"; status_is "status with an unknown host" 75 $?
check "it says no such host" grep -q "nohost.invalid:7411: no such host" "$tmp/err"
"$DLOCK" --addr "127.0.0.1:1,unix:$tmp/nobody.sock" info 2>"$tmp/err"; status_is "info with nothing listening" 75 $?
check "it says refused, for each address" \
    grep -q "127.0.0.1:1: connection refused.*; unix:$tmp/nobody.sock: no such socket" "$tmp/err"
"$DLOCK" status 2>/dev/null; status_is "status without NAME is a usage error" 2 $?
"$DLOCK" frob 2>/dev/null; status_is "unknown command" 2 $?
"$DLOCK" run 2>/dev/null; status_is "run without NAME and CMD" 125 $?
"$DLOCK" run --wait soon x -- true 2>/dev/null; status_is "run with a bad --wait" 125 $?
"$DLOCK" --addr "unix:$tmp/nobody.sock" run x -- true 2>/dev/null; status_is "run without a server" 75 $?
"$DLOCK" run -n -c true 2>/dev/null; status_is "run -c without NAME" 125 $?
"$DLOCK" run -S 2 s1 s2 -- true 2>/dev/null; status_is "a semaphore of two names" 125 $?
"$DLOCK" run 'bad name' -- true 2>"$tmp/err"; status_is "run with a bad name" 125 $?
check "it names it" grep -q "invalid lock name 'bad name'" "$tmp/err"

# A dlockd that accepts but does not answer (stopped): timed out, not refused.
kill -STOP "$DLOCKD_PID"
"$DLOCK" ping 2>"$tmp/err"; st=$?
kill -CONT "$DLOCKD_PID"
status_is "ping of a stopped dlockd" 75 $st
check "it says timed out" grep -q "dlockd.sock: no answer from dlockd (timed out)" "$tmp/err"

# ---------------------------------------------------------------- ls, sessions, kill, force

"$DLOCK" run --name ops-holder ops-1 -- sleep 30 &
holder=$!
pids="$pids $holder"
check "a run holds ops-1" wait_until 5000 held ops-1
"$DLOCK" ls 2>"$tmp/err"; status_is "ls without the admin password" 1 $?
check "it says what is missing" grep -q "admin password: --adminpass or \$DLOCK_ADMINPASS" "$tmp/err"
"$DLOCK" --adminpass wrong ls 2>"$tmp/err"; status_is "ls with a wrong admin password" 1 $?
check "it says so" grep -q "admin password was refused" "$tmp/err"
export DLOCK_ADMINPASS=cli-b0ss
check "ls shows ops-1" sh -c "\"$DLOCK\" ls 'ops-*' | grep -q '^ops-1  *lock  *1  *0\$'"
check "ls --json" sh -c "\"$DLOCK\" --json ls | grep -q '^{\"names\":\\[.*\"ops-1\".*\"more\":0}\$'"
check "sessions shows the run" sh -c "\"$DLOCK\" sessions | grep -q ' ops-holder .* 1  *0\$'"
sid=$("$DLOCK" --json sessions | sed -n 's/.*"session":"\([0-9a-f]*\)","client":"ops-holder".*/\1/p')
check "sessions --json names the session" matches "$sid" '[0-9a-f]\{16\}$'
check "force frees ops-1" sh -c "\"$DLOCK\" force ops-1 | grep -qx 'ops-1: 1 hold freed'"
wait "$holder"; status_is "the run that lost ops-1 to force" 76 $?
"$DLOCK" run --name ops-victim ops-2 -- sleep 30 &
victim=$!
pids="$pids $victim"
check "a run holds ops-2" wait_until 5000 held ops-2
sid=$("$DLOCK" --json sessions | sed -n 's/.*"session":"\([0-9a-f]*\)","client":"ops-victim".*/\1/p')
check "kill ends its session" sh -c "\"$DLOCK\" kill '$sid' | grep -qx 'session $sid ended'"
wait "$victim"; status_is "the run whose session was killed" 76 $?
check "ops-2 is free" "$DLOCK" run -n ops-2 -- true
"$DLOCK" kill 0123456789abcdef 2>"$tmp/err"; status_is "kill of an unknown session" 1 $?
check "it says why" grep -q "no live session" "$tmp/err"
"$DLOCK" ls a b 2>/dev/null; status_is "ls with two patterns" 2 $?
"$DLOCK" --limit 0 ls 2>/dev/null; status_is "ls --limit 0" 2 $?
unset DLOCK_ADMINPASS

# ---------------------------------------------------------------- run: status, token

"$DLOCK" run st -- sh -c 'exit 3'; status_is "run exits with CMD's status" 3 $?
"$DLOCK" run st -- /nonexistent/cmd 2>"$tmp/err"; status_is "CMD not found" 127 $?
check "not found is reported" grep -q "/nonexistent/cmd" "$tmp/err"
"$DLOCK" run st -- "$tmp" 2>/dev/null; status_is "CMD not executable" 126 $?
t1=$("$DLOCK" run tok -- sh -c 'echo "$DLOCK_TOKEN"')
t2=$("$DLOCK" run tok -- sh -c 'echo "$DLOCK_TOKEN"')
check "DLOCK_TOKEN is a 16-digit token" matches "$t1" '[1-9][0-9]\{15\}$'
check "DLOCK_TOKEN grows ($t1 < $t2)" test "$t1" -lt "$t2"
check "DLOCK_NAME is set" sh -c "[ \"\$(\"$DLOCK\" run tok -- sh -c 'echo \$DLOCK_NAME')\" = tok ]"
check "the lock is free again after CMD" sh -c "! \"$DLOCK\" status tok | grep -q holder"

# ---------------------------------------------------------------- run -c, several names

"$DLOCK" run -c 'exit 4' cmd1 2>/dev/null; status_is "run -c exits with the shell's status" 4 $?
out=$("$DLOCK" run -c 'echo "[$DLOCK_NAME]"' cmd1); check "run -c runs it with /bin/sh ($out)" test "$out" = "[cmd1]"
out=$("$DLOCK" run cmd1 -c 'echo "flock $DLOCK_NAME"'); check "NAME -c CMD, as flock ($out)" test "$out" = "flock cmd1"
out=$("$DLOCK" run two1 two2 -- sh -c 'echo $DLOCK_NAME; echo $DLOCK_TOKEN; \
    "$0" status two1 | grep -c "1 holder,"; "$0" status two2 | grep -c "1 holder,"' "$DLOCK")
check "two names: DLOCK_NAME" test "$(echo "$out" | sed -n 1p)" = "two1 two2"
check "two names: a token each" matches "$(echo "$out" | sed -n 2p)" '[1-9][0-9]\{15\} [1-9][0-9]\{15\}$'
check "two names: both held while CMD runs" test "$(echo "$out" | sed -n 3,4p | tr '\n' ' ')" = "1 1 "
check "two names: both free after" unheld two1 two2
spawn "$DLOCK" run two2 -- sleep 3
holder=$!
wait_until 5000 held two2
"$DLOCK" run -n -c "touch '$tmp/two-ran'" two1 two2 2>/dev/null; status_is "two names, one taken: not granted" 75 $?
check "all or nothing: the free one was not taken" unheld two1
"$DLOCK" run -n two2 two1 -- touch "$tmp/two-ran" 2>/dev/null; status_is "the other order" 75 $?
check "CMD did not run either time" test ! -e "$tmp/two-ran"
kill "$holder"; wait "$holder" 2>/dev/null

# ---------------------------------------------------------------- run: two runs serialize

: >"$tmp/order"
spawn "$DLOCK" run ser -- sh -c "echo start1 >>'$tmp/order'; sleep 1; echo end1 >>'$tmp/order'"
first=$!
check "the first run holds the lock" wait_until 5000 held ser
t0=$(now_ms)
"$DLOCK" run ser -- sh -c "echo start2 >>'$tmp/order'"; st=$?
took=$(($(now_ms) - t0))
wait "$first"
status_is "the second run waits and succeeds" 0 $st
check "the second CMD started after the first ended" test "$(tr '\n' ' ' <"$tmp/order")" = "start1 end1 start2 "
check "the second run waited (${took} ms)" test "$took" -ge 500

# ---------------------------------------------------------------- run: timeouts, shared, semaphores

spawn "$DLOCK" run busy -- sleep 3
holder=$!
wait_until 5000 held busy
t0=$(now_ms)
"$DLOCK" run --wait 300ms busy -- true 2>"$tmp/err"; st=$?
took=$(($(now_ms) - t0))
status_is "--wait runs out" 75 $st
check "after the wait (${took} ms)" test "$took" -ge 250
check "the timeout is reported" grep -q "busy: not granted" "$tmp/err"
"$DLOCK" run -n busy -- true 2>/dev/null; status_is "--nonblock on a taken lock" 75 $?
t0=$(now_ms)
"$DLOCK" run -w 1 busy -- true 2>/dev/null; st=$?
took=$(($(now_ms) - t0))
status_is "-w 1 runs out" 75 $st
check "-w 1 is one second, as flock ($took ms)" test "$took" -ge 950 -a "$took" -lt 2500
t0=$(now_ms)
"$DLOCK" run -w 0.3 busy -- true 2>/dev/null; st=$?
took=$(($(now_ms) - t0))
check "-w 0.3 is 300 ms ($took ms, status $st)" test "$st" -eq 75 -a "$took" -ge 250 -a "$took" -lt 1000
"$DLOCK" run -E 9 --wait 0 busy -- true 2>/dev/null; status_is "-E sets the timeout status" 9 $?
"$DLOCK" --json run -n busy -- true 2>"$tmp/err"
check "--json messages on stderr" grep -q '^{"event":"timeout","message":' "$tmp/err"
kill "$holder"; wait "$holder" 2>/dev/null

spawn "$DLOCK" run --shared rw -- sleep 2
reader=$!
wait_until 5000 held rw
"$DLOCK" run --shared -n rw -- true; status_is "two shared runs at once" 0 $?
"$DLOCK" run -n rw -- true 2>/dev/null; status_is "exclusive beside a shared one" 75 $?
kill "$reader"; wait "$reader" 2>/dev/null

spawn "$DLOCK" run --semaphore 2 pool -- sleep 3
p1=$!
spawn "$DLOCK" run --semaphore 2 pool -- sleep 3
p2=$!
check "two permits taken" wait_until 5000 sh -c "\"$DLOCK\" status pool | grep -q '0 free, 2 holders'"
"$DLOCK" run --semaphore 2 -n pool -- true 2>/dev/null; status_is "a third permit is not free" 75 $?
kill "$p1" "$p2"; wait "$p1" "$p2" 2>/dev/null
"$DLOCK" run --semaphore 2 -n pool -- true; status_is "permits come back when the runs end" 0 $?

# ---------------------------------------------------------------- run --verbose

spawn "$DLOCK" --name vholder run vb -- sleep 2
holder=$!
wait_until 5000 held vb
spawn "$DLOCK" run vb -- true
check "a first waiter" wait_until 5000 waiting vb
"$DLOCK" run --verbose -w 20 vb -- true 2>"$tmp/err"; st=$?
status_is "run --verbose waits and succeeds" 0 $st
check "it tells who holds it" grep -q "^dlock: vb: held by vholder (session [0-9a-f]*); 1 waiting before us (position 2 in the queue)\$" "$tmp/err"
check "once: no polling" test "$(grep -c 'held by' "$tmp/err")" -eq 1
check "and when it is granted" grep -q "^dlock: vb: granted\$" "$tmp/err"
"$DLOCK" run --verbose vb -- true 2>"$tmp/err"
check "nothing to tell when it is free" test ! -s "$tmp/err"
spawn "$DLOCK" --name vholder2 run vb -- sleep 2
holder=$!
wait_until 5000 held vb
"$DLOCK" run -v -n vb -- true 2>"$tmp/err"; status_is "run -v -n on a taken lock" 75 $?
check "tells who holds it, then gives up" sh -c "grep -q 'vb: held by vholder2 (session' '$tmp/err' && \
    grep -q 'vb: not granted within the wait' '$tmp/err'"
kill "$holder"; wait "$holder" 2>/dev/null

# ---------------------------------------------------------------- run: signals

spawn "$DLOCK" run sig -- sh -c "trap 'exit 7' USR1; echo ready >'$tmp/ready'; while :; do sleep 0.05; done"
runner=$!
wait_until 5000 test -s "$tmp/ready"
kill -USR1 "$runner"
wait "$runner"; status_is "SIGUSR1 is passed to CMD (which exits 7)" 7 $?

spawn "$DLOCK" run sig -- sleep 30
runner=$!
wait_until 5000 held sig
kill -TERM "$runner"
wait "$runner"; status_is "SIGTERM is passed to CMD (128+15)" 143 $?
check "the lock is released" sh -c "\"$DLOCK\" run -n sig -- true"

spawn "$DLOCK" run sigw -- sleep 30
holder=$!
wait_until 5000 held sigw
"$DLOCK" run sigw -- touch "$tmp/should-not-exist" 2>"$tmp/err" &
waiter=$!
pids="$pids $waiter"
check "the second run waits" wait_until 5000 waiting sigw
kill -INT "$waiter"
wait "$waiter"; status_is "a signal ends the wait (128+2)" 130 $?
check "and says so" grep -q "while waiting for sigw" "$tmp/err"
check "its CMD never ran" test ! -e "$tmp/should-not-exist"
check "it left the queue" wait_until 3000 sh -c "\"$DLOCK\" --json status sigw | grep -q '\"waiters\":0'"
kill "$holder"; wait "$holder" 2>/dev/null

# ---------------------------------------------------------------- run: a lost lock terminates CMD

# The session ttl is 1s; dlock is stopped for 2s, so dlockd expires the session and releases the lock.
rm -f "$tmp/child"
"$DLOCK" run --ttl 1s --grace 1s lost -- sh -c "echo \$\$ >'$tmp/child'; exec sleep 30" 2>"$tmp/err" &
runner=$!
pids="$pids $runner"
wait_until 5000 test -s "$tmp/child"
child=$(cat "$tmp/child")
kill -STOP "$runner"
sleep 2
check "meanwhile another run gets the lock" "$DLOCK" run -n lost -- true
kill -CONT "$runner"
wait "$runner"; st=$?
status_is "a lost lock ends the run" 76 $st
check "CMD was terminated" sh -c "! kill -0 $child 2>/dev/null"
check "dlock said so" grep -q "lost the lock lost (expired)" "$tmp/err"
"$DLOCK" run --ttl 1s --grace 500ms lost -- sh -c "trap '' TERM; echo \$\$ >'$tmp/child'; exec sleep 30" \
    2>"$tmp/err" &
runner=$!
pids="$pids $runner"
: >"$tmp/child"
wait_until 5000 test -s "$tmp/child"
kill -STOP "$runner"
sleep 2
kill -CONT "$runner"
wait "$runner"; status_is "CMD that ignores SIGTERM" 76 $?
check "dlock reported the loss" grep -q "lost the lock lost (expired): sending SIGTERM" "$tmp/err"
check "and the SIGKILL after the grace period" grep -q "sending SIGKILL" "$tmp/err"
check "CMD is gone" sh -c "! kill -0 $(cat "$tmp/child") 2>/dev/null"

# ---------------------------------------------------------------- run: a loss found after CMD ended

# dlock is stopped past its session ttl while its short CMD ends: it learns of the loss only when
# it goes on, and must not exit 0 then.
: >"$tmp/child"
"$DLOCK" run --ttl 1s late -- sh -c "echo \$\$ >'$tmp/child'; sleep 0.5" 2>"$tmp/err" &
runner=$!
pids="$pids $runner"
wait_until 5000 test -s "$tmp/child"
kill -STOP "$runner"
sleep 2
check "meanwhile another run gets the lock" "$DLOCK" run -n late -- true
kill -CONT "$runner"
wait "$runner"; status_is "a loss found after CMD ended" 76 $?
check "dlock said so" grep -q "lost the lock late" "$tmp/err"

# ---------------------------------------------------------------- run: kill -9 of its dlockd

# A second dlockd on the same Redis with --lock-lease 3s, which it tells in HELLO (lease=, the
# server's part of issue 12): its holds lapse 2 to 3 s after it dies, and a waiter on the first
# dlockd gets the lock then. CMD must have been stopped before.
spawn "$DLOCKD" --listen "unix:$tmp/d2.sock" --redis "unix:$tmp/redis.sock" --lock-lease 3s --log-level debug \
    >"$tmp/d2.log" 2>&1
d2=$!
check "a second dlockd with --lock-lease 3s" wait_until 5000 "$DLOCK" -a "unix:$tmp/d2.sock" ping
: >"$tmp/crash"
"$DLOCK" -a "unix:$tmp/d2.sock" run --grace 1s crash -- sh -c \
    "trap 'echo stopped >>\"$tmp/crash\"; exit 0' TERM; echo started >>\"$tmp/crash\"; while :; do sleep 0.05; done" \
    2>"$tmp/err" &
runner=$!
pids="$pids $runner"
wait_until 5000 grep -q started "$tmp/crash"
kill -9 "$d2"
t0=$(now_ms)
"$DLOCK" run --wait 20s crash -- sh -c "echo granted >>'$tmp/crash'" &
waiter=$!
pids="$pids $waiter"
wait "$runner"; st=$?
took=$(($(now_ms) - t0))
status_is "the run whose dlockd died" 76 $st
check "it stopped CMD and ended ${took} ms after the kill, within the lock-lease (3 s)" test "$took" -lt 3000
check "and said why" grep -q "lost the lock crash (jeopardy)" "$tmp/err"
wait "$waiter"; status_is "a waiter on the other dlockd gets the lock" 0 $?
check "only after CMD stopped" test "$(tr '\n' ' ' <"$tmp/crash")" = "started stopped granted "

# ---------------------------------------------------------------- Redis stopped: ERR BACKEND is temporary

spawn "$REDIS" --port 0 --unixsocket "$tmp/redis3.sock" --save "" --appendonly no --dir "$tmp" >"$tmp/redis3.log" 2>&1
redis3=$!
wait_until 5000 test -S "$tmp/redis3.sock"
spawn "$DLOCKD" --listen "unix:$tmp/d3.sock" --redis "unix:$tmp/redis3.sock" --log-level debug >"$tmp/d3.log" 2>&1
check "a third dlockd on its own Redis" wait_until 5000 "$DLOCK" -a "unix:$tmp/d3.sock" ping
kill "$redis3"; wait "$redis3" 2>/dev/null
check "Redis is gone" wait_until 5000 sh -c "! \"$DLOCK\" -a 'unix:$tmp/d3.sock' ping"
"$DLOCK" -a "unix:$tmp/d3.sock" ping >"$tmp/out" 2>&1; status_is "ping while Redis is down" 75 $?
check "it reports the backend down" grep -q "^PONG [0-9.]* ms, backend down" "$tmp/out"
"$DLOCK" -a "unix:$tmp/d3.sock" run rs -- touch "$tmp/rs-ran" 2>"$tmp/err"; status_is "run while Redis is down" 75 $?
check "it says ERR BACKEND" grep -q "rs: .*(ERR BACKEND)" "$tmp/err"
check "CMD did not run" test ! -e "$tmp/rs-ran"
"$DLOCK" -a "unix:$tmp/d3.sock" status rs 2>/dev/null; status_is "status while Redis is down" 75 $?

# ---------------------------------------------------------------- dlockd --help

"$DLOCKD" --help >"$tmp/help" 2>"$tmp/err"; status_is "dlockd --help" 0 $?
check "on stdout only" test -s "$tmp/help" -a ! -s "$tmp/err"
sed -n 's/^ *K("\([a-z-]*\)", *[A-Z_]*, *[a-z_]*, *\("[^"]*"\|NULL\).*/\1 \2/p' "$top/daemon/core/config.h" |
while read -r key deflt; do
    deflt=$(echo "$deflt" | tr -d '"')
    [ "$deflt" = NULL ] || [ -z "$deflt" ] && deflt="(none)"
    if grep -q "^  $key  *default $deflt " "$tmp/help"; then echo "ok - --help lists $key ($deflt)"; else echo "FAIL - --help lists $key ($deflt)"; echo x >>"$tmp/help-fail"; fi
done
check "--help lists every key with its default" test ! -e "$tmp/help-fail"
check "--help lists the keys of daemon/core/config.h" test "$(grep -c ' default ' "$tmp/help")" -eq "$(echo "$keys0" | wc -w)"

# ---------------------------------------------------------------- man pages

for page in dlockd.8 dlockd.conf.5 dlock.1 libdlock.3; do
    src=$top/man/$page.in
    check "man/$page.in has a title and NAME" sh -c "grep -q '^\.TH ' '$src' && grep -q '^\.SH NAME' '$src'"
    check "man/$page is built" test -s "$build/man/$page"
done
keys=$(sed -n 's/^ *K("\([a-z-]*\)", *[A-Z_]*, .*/\1/p' "$top/daemon/core/config.h")
check "config keys found in daemon/core/config.h" test -n "$keys"
for key in $keys; do
    roff=$(echo "$key" | sed 's/-/\\\\-/g')
    check "dlockd.conf(5) documents $key" grep -q "^\.BI $roff " "$top/man/dlockd.conf.5.in"
done
check "dlockd(8) shows the invocation" sh -c "grep -q 'CONFIG-FILE' '$top/man/dlockd.8.in' && grep -q 'key.*value' '$top/man/dlockd.8.in'"
for code in 75 76 125 126 127; do
    check "dlock(1) documents exit status $code" grep -Eq "^([0-9]+, )*$code(, [0-9]+)*\$" "$top/man/dlock.1.in"
done

# ---------------------------------------------------------------- make install, and an outside program

inst=$tmp/inst
if env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL "${MAKE:-make}" -C "$build" install DESTDIR="$inst" >"$tmp/install.log" 2>&1; then
    ok "make install DESTDIR=..."
else
    fail "make install DESTDIR=... (see $tmp/install.log)"
fi
pc=$(find "$inst" -name libdlock.pc | head -1)
for f in dlock.h libdlock.so bin/dlock sbin/dlockd man1/dlock.1 man3/libdlock.3 man5/dlockd.conf.5 man8/dlockd.8 \
    doc/dlockd/PROTOCOL.md; do
    check "installed: $f" sh -c "find '$inst' -path '*/$f' | grep -q ."
done
check "installed: libdlock.pc" test -n "$pc"
if [ -n "$pc" ]; then
    # The .pc file names the final prefix; PKG_CONFIG_SYSROOT_DIR puts DESTDIR in front of it.
    export PKG_CONFIG_PATH=$(dirname "$pc") PKG_CONFIG_SYSROOT_DIR=$inst
    flags=$(pkg-config --cflags --libs libdlock); st=$?
    status_is "pkg-config --cflags --libs libdlock: $flags" 0 $st
    # The same CFLAGS/LDFLAGS as this build (a sanitizer build needs them to link).
    cflags=$(sed -n 's/^CFLAGS = //p' "$build/Makefile")
    ldflags=$(sed -n 's/^LDFLAGS = //p' "$build/Makefile")
    # shellcheck disable=SC2086
    if ${CC:-cc} $cflags "$top/client/examples/counter.c" $flags $ldflags -o "$tmp/counter" 2>"$tmp/cc.log"; then
        ok "the example builds against the installed library"
    else
        fail "the example does not build: $(cat "$tmp/cc.log")"
    fi
    libdir=$(dirname "$(find "$inst" -name 'libdlock.so' | head -1)")
    export LD_LIBRARY_PATH=$libdir
    check "it runs with the installed library" sh -c "ldd '$tmp/counter' | grep -q '$libdir/libdlock.so'"
    "$tmp/counter" "$tmp/count" 50 >/dev/null & c1=$!
    "$tmp/counter" "$tmp/count" 50 >/dev/null & c2=$!
    wait $c1; s1=$?
    wait $c2; s2=$?
    check "two copies of it count to 100 under the lock" test "$s1$s2" = 00 -a "$(cat "$tmp/count")" = 100
    unset LD_LIBRARY_PATH PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR
fi

check "dlockd is still running" alive "$DLOCKD_PID"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

#!/bin/sh
# check_systemd.sh - the systemd units: the built dlockd.service has its paths filled in and the
# settings dlockd relies on; `systemd-analyze verify` accepts it (its ExecStart pointed at the
# built daemon) together with dlockd.socket; `systemd-analyze security --offline=true` rates
# it at most 1.5 (MAX_EXPOSURE); the sysusers.d entry creates the dlockd user in a scratch
# root; the install rules put units, sysusers entry and config in place and keep an edited
# config. With strace (not in sanitizer builds), dlockd also runs a short session while
# traced, and every system call and socket family it used must pass the unit's
# SystemCallFilter= and RestrictAddressFamilies=.
# Needs no running systemd. Without systemd-analyze it is skipped (exit 77).
# Run by `make check` from the build directory, with $top_srcdir pointing at the sources; by
# hand: cd BUILDDIR && make systemd/dlockd.service && top_srcdir=SRCDIR SRCDIR/tests/check_systemd.sh
set -u

MAX_EXPOSURE=1.5

build=$(pwd)
top=$(cd "${top_srcdir:-$(dirname "$0")/..}" && pwd)
ANALYZE=${SYSTEMD_ANALYZE:-$(command -v systemd-analyze)}
unit=$build/systemd/dlockd.service
socket=$top/systemd/dlockd.socket
sysusers=$top/systemd/sysusers.d/dlockd.conf
passed=0
failed=0

if [ -z "$ANALYZE" ]; then
    echo "SKIP: systemd-analyze not found (apt-get install systemd)"
    exit 77
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/check_systemd.XXXXXX") || exit 1
pids=""
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    if [ "$failed" -eq 0 ] && [ -z "${KEEP:-}" ]; then rm -rf "$tmp"; else echo "files kept in $tmp"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

ok() { passed=$((passed + 1)); echo "ok - $*"; }
fail() { failed=$((failed + 1)); echo "FAIL - $*"; }
# check DESCRIPTION COMMAND...: the command succeeds.
check() { d=$1; shift; if "$@"; then ok "$d"; else fail "$d"; fi; }
# has FILE LINE: the file has exactly this line.
has() { grep -qxF -- "$2" "$1"; }
# make_in_build TARGET... VAR=VALUE...: make in the build tree, outside the make running the tests.
make_in_build() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL "${MAKE:-make}" -C "$build" "$@"; }
dlock_quiet() { "$build/client/dlock" "$@" >/dev/null 2>&1; }

echo "# $("$ANALYZE" --version | head -1)"

# ---------------------------------------------------------------- the built unit

if [ ! -f "$unit" ]; then
    fail "$unit is not built (make systemd/dlockd.service)"
    echo "$passed passed, $failed failed"
    exit 1
fi
check "dlockd.service has every @VAR@ filled in" sh -c "! grep -n '@[A-Za-z_]*@' '$unit'"
check "ExecStart= runs SBINDIR/dlockd SYSCONFDIR/dlockd/dlockd.conf" \
    grep -Eqx 'ExecStart=/[^ ]*/dlockd /[^ ]*/dlockd/dlockd\.conf' "$unit"
# shellcheck disable=SC2016 # $MAINPID is meant literally
for line in Type=notify NotifyAccess=main 'ExecReload=/bin/kill -HUP $MAINPID' WatchdogSec=30s \
    Restart=on-failure User=dlockd RuntimeDirectory=dlockd RuntimeDirectoryPreserve=yes \
    'RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6'; do
    check "dlockd.service: $line" has "$unit" "$line"
done
# dlockd talks TCP to Redis, maybe remote, and to its clients.
check "dlockd.service keeps the network (no PrivateNetwork=, IPAddressDeny=)" \
    sh -c "! grep -Eq '^(PrivateNetwork=(yes|true|on|1)|IPAddressDeny=)' '$unit'"
check "dlockd.socket listens on 127.0.0.1:7411" has "$socket" "ListenStream=127.0.0.1:7411"
check "dlockd.socket listens on /run/dlockd/dlockd.sock" has "$socket" "ListenStream=/run/dlockd/dlockd.sock"

# ---------------------------------------------------------------- systemd-analyze verify

# verify checks that ExecStart= can be executed: a copy of the unit runs the built daemon.
mkdir -p "$tmp/units"
sed "s|^ExecStart=[^ ]*/dlockd |ExecStart=$build/daemon/dlockd |" "$unit" >"$tmp/units/dlockd.service"
cp "$socket" "$tmp/units/dlockd.socket"
check "the test copy runs the built daemon" grep -q "^ExecStart=$build/daemon/dlockd " "$tmp/units/dlockd.service"
# Documentation= names man pages: with man(1) there, verify looks them up among the built ones.
man_opt=--man=no
if command -v man >/dev/null 2>&1 && [ -f "$build/man/dlockd.8" ] && [ -f "$build/man/dlockd.conf.5" ]; then
    mkdir -p "$tmp/man/man8" "$tmp/man/man5"
    cp "$build/man/dlockd.8" "$tmp/man/man8/"
    cp "$build/man/dlockd.conf.5" "$tmp/man/man5/"
    man_opt=--man=yes
fi
MANPATH=$tmp/man "$ANALYZE" verify "$man_opt" "$tmp/units/dlockd.service" "$tmp/units/dlockd.socket" \
    >"$tmp/verify.log" 2>&1
st=$?
# verify exits 0 on unknown keys and bad values, which it only logs: any line about our units fails.
if [ "$st" -eq 0 ] && ! grep -q 'dlockd' "$tmp/verify.log"; then
    ok "systemd-analyze verify $man_opt dlockd.service dlockd.socket"
else
    fail "systemd-analyze verify $man_opt dlockd.service dlockd.socket (status $st):"
    sed 's/^/    /' "$tmp/verify.log"
fi
# The check itself works: a misspelt key is reported.
sed 's/^ProtectHome=/ProtectHom=/' "$tmp/units/dlockd.service" >"$tmp/units/bad.service"
"$ANALYZE" verify --man=no "$tmp/units/bad.service" >"$tmp/verify-bad.log" 2>&1
check "verify reports a misspelt key in a unit" grep -q "Unknown key.*ProtectHom" "$tmp/verify-bad.log"

# ---------------------------------------------------------------- systemd-analyze security

"$ANALYZE" security --offline=true --no-pager "$unit" >"$tmp/security.log" 2>&1
st=$?
score=$(sed -n 's/.*Overall exposure level for [^:]*: \([0-9][0-9.]*\).*/\1/p' "$tmp/security.log")
if [ -z "$score" ]; then
    fail "systemd-analyze security --offline=true dlockd.service gave no score (status $st):"
    sed 's/^/    /' "$tmp/security.log"
elif awk -v s="$score" -v m="$MAX_EXPOSURE" 'BEGIN { exit !(s <= m) }'; then
    ok "systemd-analyze security: exposure $score (at most $MAX_EXPOSURE)"
    grep '✗' "$tmp/security.log" | sed 's/^/#   /'
else
    fail "systemd-analyze security: exposure $score, above $MAX_EXPOSURE:"
    grep '✗' "$tmp/security.log" | sed 's/^/    /'
fi

# ---------------------------------------------------------------- sysusers.d

if command -v systemd-sysusers >/dev/null 2>&1; then
    mkdir -p "$tmp/root/etc"
    if systemd-sysusers --root="$tmp/root" "$sysusers" >"$tmp/sysusers.log" 2>&1; then
        ok "systemd-sysusers --root=... accepts sysusers.d/dlockd.conf"
    else
        fail "systemd-sysusers rejects sysusers.d/dlockd.conf: $(cat "$tmp/sysusers.log")"
    fi
    check "it creates the system user dlockd" grep -q '^dlockd:x:[0-9]*:[0-9]*:' "$tmp/root/etc/passwd"
    check "and the group dlockd" grep -q '^dlockd:x:[0-9]*:' "$tmp/root/etc/group"
else
    echo "# systemd-sysusers not found: sysusers.d entry not checked"
fi

# ---------------------------------------------------------------- install rules

# Only the targets of this fragment: a whole `make install` runs in check_cli.sh, maybe at once.
inst=$tmp/inst
dirs=$(make_in_build -s print-systemd-dirs 2>/dev/null)
unitdir=$(echo "$dirs" | sed -n 's/^unitdir=//p')
usersdir=$(echo "$dirs" | sed -n 's/^sysusersdir=//p')
confdir=$(echo "$dirs" | sed -n 's/^confdir=//p')
check "make print-systemd-dirs names the config directory" test -n "$confdir"
check "ExecStart= names the installed config" grep -q "^ExecStart=.* $confdir/dlockd\.conf\$" "$unit"
if make_in_build install-systemdsystemunitDATA install-sysusersDATA install-data-local \
    DESTDIR="$inst" >"$tmp/install.log" 2>&1; then
    ok "make install-systemdsystemunitDATA install-sysusersDATA install-data-local DESTDIR=..."
else
    fail "installing the units and config (see $tmp/install.log)"
fi
if [ -n "$unitdir" ] && [ "$unitdir" != no ]; then
    check "installed: $unitdir/dlockd.service" cmp -s "$unit" "$inst$unitdir/dlockd.service"
    check "installed: $unitdir/dlockd.socket" cmp -s "$socket" "$inst$unitdir/dlockd.socket"
else
    echo "# configured --without-systemdsystemunitdir: units not installed"
fi
if [ -n "$usersdir" ] && [ "$usersdir" != no ]; then
    check "installed: $usersdir/dlockd.conf" cmp -s "$sysusers" "$inst$usersdir/dlockd.conf"
fi
check "installed: the config the unit names ($confdir/dlockd.conf)" \
    cmp -s "$top/conf/dlockd.conf" "$inst$confdir/dlockd.conf"
echo 'requirepass local-change' >>"$inst$confdir/dlockd.conf"
make_in_build install-data-local uninstall-local DESTDIR="$inst" >>"$tmp/install.log" 2>&1
check "an edited config survives install and uninstall" grep -q '^requirepass local-change' "$inst$confdir/dlockd.conf"
cp "$top/conf/dlockd.conf" "$inst$confdir/dlockd.conf"
make_in_build uninstall-local DESTDIR="$inst" >>"$tmp/install.log" 2>&1
check "uninstall removes an unchanged config" test ! -e "$inst$confdir/dlockd.conf"

# ---------------------------------------------------------------- the sandbox lets dlockd work

# expand GROUP-OR-CALL...: the system calls of systemd's groups, nested groups expanded.
# (Unquoted expansions below split lists of names on purpose; names have no glob characters.)
# shellcheck disable=SC2046,SC2086
expand() {
    for item in "$@"; do
        case $item in
            @*) expand $("$ANALYZE" syscall-filter --no-pager "$item" | sed -n '2,$s/^ *\([@a-z0-9_-]*\)$/\1/p') ;;
            *) echo "$item" ;;
        esac
    done
}

# The unit's filter: every SystemCallFilter= line in order; a "~" line removes its calls.
# shellcheck disable=SC2086
allowed_calls() {
    sed -n 's/^SystemCallFilter=//p' "$unit" | while read -r f; do
        case $f in
            "~"*) echo "-"; expand ${f#"~"} ;;
            *) echo "+"; expand $f ;;
        esac
    done | awk '$0 == "+" { add = 1; next } $0 == "-" { add = 0; next }
                add { ok[$0] = 1 } !add { delete ok[$0] } END { for (c in ok) print c }' | sort -u
}

REDIS=${REDIS_SERVER:-$(command -v redis-server)}
if grep -Eq '^(CFLAGS|LDFLAGS) = .*-fsanitize' "$build/Makefile"; then
    # The sanitizer runtimes make calls of their own, and LeakSanitizer cannot run under ptrace.
    echo "# sanitizer build: system calls not checked"
elif ! command -v strace >/dev/null 2>&1 || [ -z "$REDIS" ] || ! strace -o /dev/null true 2>/dev/null; then
    echo "# strace (or redis-server) missing or not allowed here: system calls not checked"
else
    "$REDIS" --port 0 --unixsocket "$tmp/redis.sock" --save "" --appendonly no --dir "$tmp" \
        >"$tmp/redis.log" 2>&1 &
    pids="$pids $!"
    i=0
    while [ ! -S "$tmp/redis.sock" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
    # As under the unit: notify socket and watchdog set (nothing reads the socket), a unix and a
    # TCP listener, the admin endpoint, Redis on a unix socket (TCP to Redis makes the same
    # calls as the clients). Ports are random, below the kernel's ephemeral range (where the other
    # test programs, running in parallel, get theirs); another pair is tried if one is taken.
    export DLOCK_ADDR="unix:$tmp/dlockd.sock"
    for _ in 1 2 3 4 5 6 7 8; do
        port=$((10000 + $(od -An -N2 -tu2 /dev/urandom) % 20000))
        NOTIFY_SOCKET=$tmp/notify.sock WATCHDOG_USEC=200000 \
            strace -f -qq -I1 -o "$tmp/strace.log" "$build/daemon/dlockd" --listen "unix:$tmp/dlockd.sock" \
            --listen "127.0.0.1:$port" --admin-listen "127.0.0.1:$((port + 1))" \
            --redis "unix:$tmp/redis.sock" --log-level debug >"$tmp/dlockd.log" 2>&1 &
        dpid=$!
        i=0
        until "$build/client/dlock" ping >/dev/null 2>&1 || ! kill -0 "$dpid" 2>/dev/null || [ $i -ge 100 ]; do
            sleep 0.1
            i=$((i + 1))
        done
        kill -0 "$dpid" 2>/dev/null && break
    done
    pids="$pids $dpid"
    # Signals go to dlockd itself (the first pid in the trace), not to strace.
    dlockd_pid=$(sed -n '1s/^\([0-9]*\) .*/\1/p' "$tmp/strace.log")
    check "dlockd runs under strace" dlock_quiet ping
    check "a lock round trip" dlock_quiet run --wait 5s sandbox-check -- true
    check "a lock round trip over TCP" dlock_quiet --addr "127.0.0.1:$port" run sandbox-tcp -- true
    dlock_quiet info
    if command -v curl >/dev/null 2>&1; then
        check "the admin endpoint answers /metrics" curl -fsS -o /dev/null "http://127.0.0.1:$((port + 1))/metrics"
    fi
    kill -HUP "$dlockd_pid" 2>/dev/null
    i=0
    until grep -q 'config: reloaded' "$tmp/dlockd.log" || [ $i -ge 50 ]; do sleep 0.1; i=$((i + 1)); done
    check "dlockd reloads on SIGHUP" grep -q 'config: reloaded' "$tmp/dlockd.log"
    check "and still answers" dlock_quiet ping
    kill -TERM "$dlockd_pid" 2>/dev/null
    wait "$dpid" 2>/dev/null
    check "dlockd exits on SIGTERM" sh -c "! kill -0 '$dlockd_pid' 2>/dev/null"
    allowed_calls >"$tmp/allowed"
    check "the unit's SystemCallFilter= expands to a list" test "$(wc -l <"$tmp/allowed")" -gt 100
    sed -n 's/^[0-9]* *\(<\.\.\. \)\{0,1\}\([a-z_][a-z0-9_]*\)[( ].*/\2/p' "$tmp/strace.log" | sort -u >"$tmp/used"
    denied=$(comm -23 "$tmp/used" "$tmp/allowed" | tr '\n' ' ')
    check "dlockd made system calls ($(wc -l <"$tmp/used") kinds)" test -s "$tmp/used"
    if [ -z "$denied" ]; then
        ok "every system call dlockd made passes SystemCallFilter="
    else
        fail "system calls dlockd made that SystemCallFilter= refuses: $denied"
    fi
    families=$(sed -n 's/^[0-9]* *socket(\(AF_[A-Z0-9]*\).*/\1/p' "$tmp/strace.log" | sort -u | tr '\n' ' ' | sed 's/ $//')
    # AF_NETLINK comes from getaddrinfo(AI_ADDRCONFIG) (libevent's evhttp_bind_socket): when
    # it is refused, glibc assumes IPv4 and IPv6 are both configured: the unit refuses it on purpose.
    allowed_families=" $(sed -n 's/^RestrictAddressFamilies=//p' "$unit") AF_NETLINK "
    bad=""
    for f in $families; do
        case $allowed_families in *" $f "*) ;; *) bad="$bad $f" ;; esac
    done
    if [ -z "$bad" ]; then
        ok "every socket family dlockd used passes RestrictAddressFamilies= ($families)"
    else
        fail "socket families dlockd used that RestrictAddressFamilies= refuses:$bad"
    fi
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

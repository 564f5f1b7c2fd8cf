#!/usr/bin/env bash
# quickstart.sh - install what dlockd needs, build it, then run it against a private
# redis-server or run its test suite. Meant for a fresh Debian 12, as root.
#
#   ./quickstart.sh run [CONFIG-FILE] [--key value ...]
#       build, start a throw-away redis-server (free port, temp dir, no persistence) and run
#       daemon/dlockd in the foreground on 127.0.0.1:7411; Ctrl-C stops both.
#   ./quickstart.sh test
#       build and run `make -j2 check`; print the logs of failing tests.
#
# Environment:
#   WERROR=1    configure with CFLAGS="${CFLAGS:--O2 -g} -Werror"
#   SANITIZE=1  (test) build out of tree in _build-asan with ASan+UBSan and run the tests there
set -eu

top=$(cd "$(dirname "$0")" && pwd)
cd "$top"

# What `run` needs: the build (check too: configure asks for it) and redis-server.
run_pkgs=(build-essential autoconf automake libtool pkg-config libevent-dev libhiredis-dev
          libjansson-dev nettle-dev check redis-server)
# What `test` needs besides:
# systemd: systemd-analyze and systemd.pc, for tests/check_systemd.sh and the unit directory.
# python3, nftables, iproute2: make check-faults (tests/faults/: clients, network faults) and the
#   Python client's tests (clients/python).
# clang, libclang-rt-14-dev: make fuzz (libFuzzer harnesses in fuzz/, built with clang).
# golang-go: tests/check_client_go.sh (go vet and go test -race of the Go client, clients/go).
# nodejs, unless a node is already there: tests/check_client_node.sh (clients/node).
test_pkgs=("${run_pkgs[@]}" systemd python3 nftables iproute2 netcat-openbsd clang libclang-rt-14-dev
           golang-go)
command -v node >/dev/null 2>&1 || test_pkgs+=(nodejs)

say() { printf 'quickstart: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

usage() {
    sed -n '2,14s/^# \{0,1\}//p' "$0" >&2
    exit 2
}

# Runs a command as root: directly when we are root, else through sudo.
as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        die "need root (or sudo) to run: $*"
    fi
}

# install_deps PKG...: installs the Debian packages that are missing; apt-get update only if something is.
install_deps() {
    if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
        say "no apt-get here; make sure these are installed: $*"
        return 0
    fi
    local p missing=()
    for p in "$@"; do
        if [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]; then
            missing+=("$p")
        fi
    done
    [ "${#missing[@]}" -eq 0 ] && return 0
    say "installing: ${missing[*]}"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
}

# True when ./config.status was configured with exactly the arguments given.
configured_with() {
    local have
    have=$(./config.status --config 2>/dev/null) || return 1
    eval "local -a old=($have)"
    # shellcheck disable=SC2154 # old is set by the eval
    [ "$(printf '%q ' "${old[@]}")" = "$(printf '%q ' "$@")" ]
}

# build DIR [CONFIGURE-ARG ...]: autogen if needed, configure DIR if it is not configured or
# was configured with other arguments, then make -j2 there. Leaves the cwd in DIR.
build() {
    local dir=$1 srcdir
    shift
    if [ ! -x "$top/configure" ]; then
        say "./autogen.sh"
        "$top/autogen.sh"
    fi
    mkdir -p "$dir"
    cd "$dir"
    if [ "$(pwd)" = "$top" ]; then srcdir=.; else srcdir=$top; fi
    if [ ! -f Makefile ] || [ ! -x config.status ]; then
        say "configure in $(pwd): $*"
        "$srcdir/configure" "$@"
    elif ! configured_with "$@"; then
        # Objects do not depend on the flags: rebuild them all with the new ones.
        say "configure again in $(pwd), with new arguments: $*"
        "$srcdir/configure" "$@"
        make clean >/dev/null
    fi
    say "make -j2 in $(pwd)"
    make -j2 || die "build failed in $(pwd)"
}

cflags_werror() {
    printf '%s -Werror' "${CFLAGS:--O2 -g}"
}

# --- test ---------------------------------------------------------------------------------

# Prints the log of every test whose .trs says it did not pass (cwd: the build dir).
print_failures() {
    local trs found=0
    for trs in tests/*.trs; do
        [ -f "$trs" ] || continue
        if grep -Eq '^:test-result: (FAIL|ERROR|XPASS)' "$trs"; then
            found=1
            printf '\n===== %s =====\n' "$(pwd)/${trs%.trs}.log"
            cat "${trs%.trs}.log" 2>/dev/null || echo "(no log)"
        fi
    done
    [ "$found" -eq 1 ] || say "no failing test log found (did the build fail?)"
}

cmd_test() {
    install_deps "${test_pkgs[@]}"
    if [ "${SANITIZE:-0}" = 1 ]; then
        local cflags='-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer'
        [ "${WERROR:-0}" = 1 ] && cflags="$cflags -Werror"
        # automake refuses an out-of-tree build next to an in-tree one, and stale in-tree
        # objects would be found through VPATH: clean the in-tree build first.
        if [ -f "$top/config.status" ]; then
            say "make distclean in $top (an in-tree build blocks the out-of-tree ASan build)"
            make -C "$top" distclean >/dev/null || die "make distclean failed in $top"
        fi
        export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
        export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
        build "$top/_build-asan" CFLAGS="$cflags" LDFLAGS='-fsanitize=address,undefined'
    elif [ "${WERROR:-0}" = 1 ]; then
        build "$top" CFLAGS="$(cflags_werror)"
    else
        build "$top"
    fi
    say "make -j2 check in $(pwd)"
    if ! make -j2 check; then
        print_failures
        die "tests failed"
    fi
}

# --- run ----------------------------------------------------------------------------------

tmp="" redis_pid="" redis_port="" dlockd_pid="" stopping=0

# INT/TERM/HUP while running: stop dlockd; cleanup (EXIT trap) then stops redis.
on_signal() {
    stopping=1
    [ -z "$dlockd_pid" ] || kill -TERM "$dlockd_pid" 2>/dev/null || true
}

port_in_use() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# True when the redis-server on port $1 answers PING.
redis_ready() {
    (
        exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
        printf 'PING\r\n' >&3
        IFS= read -r -t 1 line <&3 || exit 1
        [ "${line%$'\r'}" = "+PONG" ]
    ) 2>/dev/null
}

stop_pid() {
    local pid=$1
    [ -n "$pid" ] || return 0
    kill -TERM "$pid" 2>/dev/null || return 0
    for _ in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
}

cleanup() {
    stop_pid "$dlockd_pid"
    if [ -n "$tmp" ] && [ -f "$tmp/redis.pid" ]; then
        redis_pid=$(cat "$tmp/redis.pid")
    fi
    stop_pid "$redis_pid"
    [ -z "$tmp" ] || rm -rf "$tmp"
}

# Starts redis-server on a free port in $tmp; sets redis_port and redis_pid.
start_redis() {
    local redis launcher=()
    redis=$(command -v redis-server) || die "redis-server not found"
    # setsid: keep Ctrl-C away from redis, so that it outlives dlockd's shutdown.
    if command -v setsid >/dev/null 2>&1; then launcher=(setsid); fi
    for _ in $(seq 20); do
        redis_port=$((20000 + RANDOM % 40000))
        port_in_use "$redis_port" && continue
        "${launcher[@]}" "$redis" --port "$redis_port" --bind 127.0.0.1 \
            --dir "$tmp" --save '' --appendonly no --daemonize no \
            --pidfile "$tmp/redis.pid" --logfile "$tmp/redis.log" </dev/null &
        redis_pid=$!
        for _ in $(seq 50); do
            if redis_ready "$redis_port"; then
                [ -f "$tmp/redis.pid" ] && redis_pid=$(cat "$tmp/redis.pid")
                return 0
            fi
            kill -0 "$redis_pid" 2>/dev/null || break
            sleep 0.1
        done
        stop_pid "$redis_pid"
        redis_pid=""
        say "redis-server did not start on port $redis_port; trying another port"
    done
    cat "$tmp/redis.log" >&2 2>/dev/null || true
    die "could not start redis-server"
}

cmd_run() {
    install_deps "${run_pkgs[@]}"
    if [ "${WERROR:-0}" = 1 ]; then build "$top" CFLAGS="$(cflags_werror)"; else build "$top"; fi
    cd "$top"

    local args=()
    # A config file must come before the --key options.
    if [ "$#" -gt 0 ] && [ "${1#-}" = "$1" ]; then
        args+=("$1")
        shift
    fi
    args+=(--listen 127.0.0.1:7411)

    tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlockd-quickstart.XXXXXX")
    trap cleanup EXIT
    trap on_signal INT TERM HUP
    start_redis
    [ "$stopping" -eq 0 ] || exit 130
    say "redis-server pid $redis_pid on 127.0.0.1:$redis_port, data in $tmp (not persisted)"
    args+=(--redis "127.0.0.1:$redis_port" "$@")

    say "daemon/dlockd ${args[*]}   (Ctrl-C stops it)"
    daemon/dlockd "${args[@]}" </dev/null &
    dlockd_pid=$!
    local status=0
    while :; do
        status=0
        wait "$dlockd_pid" || status=$?
        # wait also returns when a trapped signal arrives; go on until dlockd has exited.
        kill -0 "$dlockd_pid" 2>/dev/null || break
    done
    dlockd_pid=""
    say "dlockd exited with status $status"
    exit "$status"
}

case "${1:-}" in
    run) shift; cmd_run "$@" ;;
    test) shift; [ "$#" -eq 0 ] || usage; cmd_test ;;
    *) usage ;;
esac

#!/bin/sh
# check_install.sh - `make install` honours the prefix: the systemd units and the sysusers.d entry
# go under PREFIX/lib unless configure was told otherwise (--with-systemdsystemunitdir,
# --with-sysusersdir) or PREFIX is systemd's own, and PROTOCOL.md goes into docdir. Installs
# those targets with a prefix other than the configured one into a temporary DESTDIR.
# Run by `make check` from the build directory, with $top_srcdir pointing at the sources.
set -u

build=$(pwd)
top=$(cd "${top_srcdir:-$(dirname "$0")/..}" && pwd)
other=/opt/dlockd-check-prefix
tmp=$(mktemp -d "${TMPDIR:-/tmp}/check_install.XXXXXX") || exit 1
passed=0
failed=0

ok() { passed=$((passed + 1)); echo "ok - $*"; }
fail() { failed=$((failed + 1)); echo "FAIL - $*"; }
check() { d=$1; shift; if "$@"; then ok "$d"; else fail "$d"; fi; }
cleanup() { if [ "$failed" -eq 0 ] && [ -z "${KEEP:-}" ]; then rm -rf "$tmp"; else echo "files kept in $tmp"; fi; }
trap cleanup EXIT
trap 'exit 1' INT TERM
make_in_build() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL "${MAKE:-make}" -C "$build" "$@"; }
# dir NAME DIRS: the value of NAME= in the output of print-systemd-dirs.
dir() { echo "$2" | sed -n "s/^$1=//p"; }

configured=$(make_in_build -s print-systemd-dirs 2>/dev/null)
dirs=$(make_in_build -s print-systemd-dirs prefix="$other" 2>/dev/null)
check "make print-systemd-dirs prefix=$other" test "$(dir prefix "$dirs")" = "$other"
told=$(cd "$build" && ./config.status --config | grep -o -- "--with-\(systemdsystemunitdir\|sysusersdir\)")
systemd_prefix=$(pkg-config --variable=prefix systemd 2>/dev/null)
if [ -n "$told" ]; then
    echo "# configured with $told: not checked against the prefix"
elif [ "$(dir prefix "$configured")" = "$systemd_prefix" ]; then
    check "the prefix is systemd's: its unit directory" \
        test "$(dir unitdir "$configured")" = "$(pkg-config --variable=systemdsystemunitdir systemd)"
else
    check "units under the prefix: $(dir unitdir "$dirs")" test "$(dir unitdir "$dirs")" = "$other/lib/systemd/system"
    check "sysusers.d entry under the prefix: $(dir sysusersdir "$dirs")" \
        test "$(dir sysusersdir "$dirs")" = "$other/lib/sysusers.d"
fi
check "docdir under the prefix: $(dir docdir "$dirs")" test "$(dir docdir "$dirs")" = "$other/share/doc/dlockd"

inst=$tmp/inst
if make_in_build install-systemdsystemunitDATA install-sysusersDATA install-dist_docDATA prefix="$other" \
    DESTDIR="$inst" >"$tmp/install.log" 2>&1; then
    ok "make install-... prefix=$other DESTDIR=..."
else
    fail "make install-... prefix=$other DESTDIR=... (see $tmp/install.log)"
fi
unitdir=$(dir unitdir "$dirs")
usersdir=$(dir sysusersdir "$dirs")
if [ "$unitdir" != no ]; then
    check "installed: $unitdir/dlockd.service" test -s "$inst$unitdir/dlockd.service"
    check "installed: $unitdir/dlockd.socket" cmp -s "$top/systemd/dlockd.socket" "$inst$unitdir/dlockd.socket"
fi
if [ "$usersdir" != no ]; then
    check "installed: $usersdir/dlockd.conf" cmp -s "$top/systemd/sysusers.d/dlockd.conf" "$inst$usersdir/dlockd.conf"
fi
check "installed: PROTOCOL.md in docdir" cmp -s "$top/proto/PROTOCOL.md" "$inst$other/share/doc/dlockd/PROTOCOL.md"
check "nothing outside DESTDIR's $other" test -z "$(cd "$inst" && find . -type f ! -path ".$other/*")"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

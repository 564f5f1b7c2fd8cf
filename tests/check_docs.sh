#!/bin/sh
# check_docs.sh - every config key of daemon/config.c must be in conf/dlockd.conf and
# proto/PROTOCOL.md; every error code and implemented verb must be in PROTOCOL.md.
# Run by `make check`, which sets $top_srcdir; run by hand it uses the script's parent dir.
set -u

top=${top_srcdir:-$(dirname "$0")/..}
config_c=$top/daemon/config.c
conf=$top/conf/dlockd.conf
doc=$top/proto/PROTOCOL.md

codes="SYNTAX UNKNOWN TOOBIG NOAUTH NOSESSION NOTHELD WRONGTYPE MISMATCH DEADLOCK LIMIT BACKEND"
verbs="HELLO PING QUIT AUTH LOCK UNLOCK STATUS INFO"

passed=0
failed=0
ok() { passed=$((passed + 1)); }
fail() { failed=$((failed + 1)); echo "FAIL: $*"; }

# has FILE FIXED-STRING: the file contains the string.
has() { grep -qF -- "$2" "$1" 2>/dev/null; }

for f in "$conf" "$doc"; do
    if [ -r "$f" ]; then ok; else fail "$f is missing"; fi
done

keys=""
if [ -r "$config_c" ]; then
    keys=$(sed -n 's/^ *{ *"\([a-z-]*\)", *CONF_.*/\1/p' "$config_c")
    if [ -n "$keys" ]; then ok; else fail "no config key found in $config_c"; fi
else
    fail "$config_c is missing"
fi

for key in $keys; do
    # In the conf file a key starts a line, commented out or not: "# key value" / "key value".
    if grep -Eq "^[#[:space:]]*$key([[:space:]]|\$)" "$conf" 2>/dev/null; then
        ok
    else
        fail "config key '$key' is not in conf/dlockd.conf"
    fi
    if has "$doc" "\`$key\`"; then ok; else fail "config key '$key' is not in proto/PROTOCOL.md"; fi
done

for code in $codes; do
    if has "$doc" "\`$code\`"; then ok; else fail "error code $code is not in proto/PROTOCOL.md"; fi
done

for verb in $verbs; do
    # Each implemented verb has its own heading ("### LOCK").
    if grep -Eq "^#+ +$verb\$" "$doc" 2>/dev/null; then
        ok
    else
        fail "verb $verb has no section in proto/PROTOCOL.md"
    fi
done

echo "check_docs: $passed passed, $failed failed"
[ "$failed" -eq 0 ]

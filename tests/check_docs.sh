#!/bin/sh
# check_docs.sh - every verb, event, error code and config key of the code is in every doc that
# lists them; the lists are read from the code, so a new one without docs fails `make check`.
# Run by `make check`, which sets $top_srcdir; run by hand it uses the script's parent dir.
# The shared contract ($DLOCKD_SPEC, default ../shared/spec/protocol.md beside the source tree, where
# CI puts it) is checked when present.
set -u

top=${top_srcdir:-$(dirname "$0")/..}
spec=${DLOCKD_SPEC:-$top/../shared/spec/protocol.md}
cmd_c=$top/daemon/verbs/cmd.c
config_h=$top/daemon/core/config.h
proto_h=$top/proto/proto.h
doc=$top/proto/PROTOCOL.md
conf=$top/conf/dlockd.conf
man8=$top/man/dlockd.8.in
man5=$top/man/dlockd.conf.5.in
readme=$top/README.md

passed=0
failed=0
ok() { passed=$((passed + 1)); }
fail() { failed=$((failed + 1)); echo "FAIL: $*"; }
# check WHAT CMD...: runs CMD; passes when it succeeds, else fails with WHAT.
check() { what=$1; shift; if "$@" 2>/dev/null; then ok; else fail "$what"; fi; }

# found LIST WHAT: LIST is not empty, so that no check below passes for want of anything to check.
found() { if [ -n "$1" ]; then ok; else fail "no $2 found in the code"; fi; }

# span FILE FROM TO: the text of FILE after FROM (its last one) up to the next TO, on one line.
span() { tr '\n' ' ' <"$1" | sed -n "s/^.*$2\(.*\)$/\1/p" | sed "s/$3.*//"; }

# word KEY TEXT: TEXT holds KEY as a whole word (a config key: '-' belongs to the word);
# "every `max-*` limit" holds every max- key.
word() {
    printf '%s\n' "$2" | grep -Eq "(^|[^a-z-])$1([^a-z-]|\$)" && return 0
    case $1 in max-*) printf '%s\n' "$2" | grep -qF 'max-*' ;; *) return 1 ;; esac
}

# in_list KEY TEXT SHOULD: KEY is in TEXT when SHOULD is 1, and not in it when 0.
in_list() { if word "$1" "$2"; then [ "$3" = 1 ]; else [ "$3" = 0 ]; fi; }

# ends_with WORD TEXT: the last word of TEXT is WORD.
ends_with() { [ "$(printf '%s\n' "$2" | tr '\n' ' ' | awk '{ print $NF }')" = "$1" ]; }

# man_entry KEY: the text of KEY's entry in dlockd.conf(5), from its .BI line to the next macro
# that starts another entry.
man_entry() {
    k=$(printf '%s' "$1" | sed 's/-/\\\\-/g')
    awk -v k="$k" '$1 == ".BI" && $2 == k { on = 1; next } on && /^\.(TP|SS|SH)/ { exit } on' "$man5"
}

for f in "$cmd_c" "$config_h" "$proto_h" "$doc" "$conf" "$man8" "$man5" "$readme"; do
    check "$f is missing" test -r "$f"
done

verbs=$(sed -n 's/^ *\[VERB_\([A-Z]*\)\] *= *{.*/\1/p' "$cmd_c")
codes=$(sed -n 's/^ *PROTO_E\([A-Z]*\),.*/\1/p' "$proto_h")
events=$(grep -ho 'conn_\(event\|broadcast\)([^"]*"[A-Z][A-Z]*' "$top"/daemon/*.c "$top"/daemon/*/*.c | sed 's/.*"//' | sort -u)
keys=$(sed -n 's/^ *K("\([a-z-]*\)", *[A-Z_]*, .*/\1/p' "$config_h")
live=$(sed -n 's/^ *K("\([a-z-]*\)", *[A-Z_]*, .*, *LIVE\( *| *SECRET\)\? *).*/\1/p' "$config_h")
found "$verbs" "verb (daemon/verbs/cmd.c cmds[])"
found "$codes" "error code (proto/proto.h enum proto_err)"
found "$events" "event (conn_event, conn_broadcast)"
found "$keys" "config key (daemon/core/config.h CONFIG_KEYS)"
found "$live" "live config key (daemon/core/config.h CONFIG_KEYS)"

if [ -r "$spec" ]; then
    has_spec=1
else
    has_spec=0
    echo "note: no contract at $spec: its lists are not checked"
fi

contents=$(span "$doc" '7\. Commands:' '8\. Rules')
for verb in $verbs; do
    check "verb $verb has no section in PROTOCOL.md" grep -Eq "^### $verb\$" "$doc"
    check "verb $verb is not in the contents of PROTOCOL.md" word "$verb" "$contents"
    check "verb $verb is not in dlockd(8)" grep -Eq "^\.B $verb( |\$)" "$man8"
    [ "$has_spec" = 1 ] && check "verb $verb is not in $spec" grep -q "\`$verb" "$spec"
done

for code in $codes; do
    check "error code $code is not in the table of PROTOCOL.md" grep -q "^| \`$code\` |" "$doc"
    [ "$has_spec" = 1 ] && check "error code $code is not in $spec" grep -q "^| \`$code\` |" "$spec"
done

for event in $events; do
    # The reasons the code sends with it: literal, or handed to hold_lost() for LOST.
    reasons=$(grep -ho "conn_\(event\|broadcast\)([^\"]*\"$event [^\"]*reason=[a-z]*" "$top"/daemon/*.c "$top"/daemon/*/*.c |
        sed 's/.*reason=//')
    [ "$event" = LOST ] && reasons="$reasons $(sed -n 's/.*hold_lost(.*"\([a-z]*\)");.*/\1/p' "$top"/daemon/*.c "$top"/daemon/*/*.c)"
    line=$(grep -E "^    \* $event( |\$)" "$doc")
    check "event $event is not in section 6 of PROTOCOL.md" test -n "$line"
    for r in $reasons; do
        check "event $event reason=$r is not in PROTOCOL.md" word "$r" "$line"
    done
    line=$(grep -E "^\.B \\\\?\* $event( |\$)" "$man8")
    check "event $event is not in dlockd(8)" test -n "$line"
    for r in $reasons; do
        check "event $event reason=$r is not in dlockd(8)" word "$r" "$line"
    done
    [ "$has_spec" = 1 ] || continue
    line=$(grep "\* $event" "$spec")
    check "event $event is not in $spec" test -n "$line"
    for r in $reasons; do
        check "event $event reason=$r is not in $spec" word "$r" "$line"
    done
done

conf_live=$(span "$conf" 'These keys change at once:' 'The others need')
doc_live=$(span "$doc" 'Reloading:' 'Every other key needs a restart')
readme_live=$(span "$readme" 'These keys change at once:' 'These need')
readme_restart=$(span "$readme" 'These need' 'a reload that finds')
for key in $keys; do
    if word "$key" "$live"; then is_live=1 mark=Live; else is_live=0 mark=Restart; fi
    # In the conf file a key starts a line, commented out or not: "# key value" / "key value".
    check "config key $key is not in conf/dlockd.conf" grep -Eq "^[#[:space:]]*$key([[:space:]]|\$)" "$conf"
    check "config key $key has no row in section 11 of PROTOCOL.md" grep -q "^| \`$key\` |" "$doc"
    entry=$(man_entry "$key")
    check "config key $key has no entry in dlockd.conf(5)" test -n "$entry"
    check "config key $key does not end in $mark. in dlockd.conf(5)" ends_with "$mark." "$entry"
    check "config key $key: wrong in the reload list of conf/dlockd.conf" in_list "$key" "$conf_live" $is_live
    check "config key $key: wrong in the reload list of PROTOCOL.md" in_list "$key" "$doc_live" $is_live
    check "config key $key: wrong in the live keys of README.md" in_list "$key" "$readme_live" $is_live
    check "config key $key: wrong in the restart keys of README.md" in_list "$key" "$readme_restart" $((1 - is_live))
done

# README's Layout names every source file of daemon/ under its folder ("  core/", then the files
# indented below it), and no file that is not there.
layout=$(awk '/^## Layout/ { on = 1 } on && /^```/ { n++; if (n == 2) exit; next } on && n == 1' "$readme" |
    awk '/^daemon\/ / { in_d = 1; dir = ""; next } /^[^ ]/ { in_d = 0 } !in_d { next }
         /^  [a-z]+\/ / { sub(/\/.*/, "", $1); dir = $1 "/"; next }
         /^  [^ ]/ { dir = "" }
         { for (i = 1; i <= NF; i++) if ($i ~ /^[a-z0-9_]+\.[ch]$/) print dir $i; else if (i > 1) break }' | sort -u)
tree=$(cd "$top/daemon" && ls *.c *.h */*.c */*.h 2>/dev/null | grep -v '^backend/scripts\.c$' | sort -u)
found "$tree" "source file under daemon/"
for f in $tree; do
    # a .h beside its .c may go unnamed
    case $f in *.h) [ -e "$top/daemon/${f%.h}.c" ] && continue ;; esac
    check "README's Layout does not name daemon/$f" sh -c 'printf "%s\n" "$1" | grep -qx "$2"' _ "$layout" "$f"
done
for f in $layout; do
    check "README's Layout names daemon/$f, which is not there" test -e "$top/daemon/$f"
done

echo "check_docs: $passed passed, $failed failed"
[ "$failed" -eq 0 ]

#!/bin/sh
# check_calls.sh - every call in the daemon goes down: the call graph between its modules, read
# from the symbols of the built objects (nm), has no cycle (tsort), and no module calls one in a
# higher layer. The layers are daemon/'s folders, from the bottom up: core, backend, net, state,
# verbs, tasks, then daemon/ itself (daemon.c, main.c). A call up, or a module that calls one
# that calls it back however far round, fails `make check` with the calls behind it.
# Run by `make check` in the build directory, after the daemon is built.
set -u
LAYERS="core backend net state verbs tasks"
top=${top_srcdir:-$(dirname "$0")/..}
lib=daemon/.libs/libdlockd.a
main=daemon/dlockd-main.o
for f in "$lib" "$main"; do
    [ -f "$f" ] || { echo "check_calls: no $f (build the daemon first)"; exit 99; }
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/check_calls.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT

# "module kind symbol" for every symbol defined (T, D, B, R) or used (U) by a module.
{ nm -A "$lib"; nm -A "$main"; } 2>/dev/null |
    sed -n 's/^\(.*:\)\{0,1\}\([^:]*\)\.o: *[0-9a-f]* *\([TDBRU]\) \(.*\)$/\2 \3 \4/p' |
    sed 's#^.*/##; s/^libdlockd_la-//; s/^dlockd-//' >"$tmp/syms"
awk '$2 != "U" { print $3, $1 }' "$tmp/syms" | sort -u >"$tmp/defs"
awk '$2 == "U" { print $3, $1 }' "$tmp/syms" | sort -u >"$tmp/uses"
# "caller callee symbol", across modules only
join "$tmp/uses" "$tmp/defs" | awk '$2 != $3 { print $2, $3, $1 }' | sort -u >"$tmp/calls"
modules=$(cut -d' ' -f1 "$tmp/syms" | sort -u | wc -l)
edges=$(cut -d' ' -f1,2 "$tmp/calls" | sort -u | wc -l)
if [ "$modules" -lt 10 ] || [ "$edges" -lt 10 ]; then
    echo "check_calls: read only $modules modules and $edges calls: nm's output not understood"
    exit 1
fi
# "module rank" from where its .c is (the build directory has the generated ones); proto/, the
# protocol library linked in, is below them all
for m in $(cut -d' ' -f1 "$tmp/syms" | sort -u); do
    rank=0
    [ -f "$top/proto/$m.c" ] && { echo "$m 0"; continue; }
    for dir in "$top/daemon" daemon; do
        [ -f "$dir/$m.c" ] && rank=$(($(echo $LAYERS | wc -w) + 1))
        i=1
        for l in $LAYERS; do
            [ -f "$dir/$l/$m.c" ] && rank=$i
            i=$((i + 1))
        done
        [ "$rank" -gt 0 ] && break
    done
    [ "$rank" -gt 0 ] || { echo "check_calls: no daemon/*/$m.c: which layer is $m in?" >&2; exit 1; }
    echo "$m $rank"
done >"$tmp/ranks" || exit 1
up=$(awk 'NR == FNR { rank[$1] = $2; next } rank[$1] < rank[$2] { print "  " $1 " -> " $2 ": " $3 }' \
    "$tmp/ranks" "$tmp/calls")
if [ -n "$up" ]; then
    echo "check_calls: calls from a lower layer to a higher one ($LAYERS, then daemon/):"
    echo "$up"
    exit 1
fi
if cut -d' ' -f1,2 "$tmp/calls" | sort -u | tsort >/dev/null 2>"$tmp/loop"; then
    echo "check_calls: $modules modules in $(echo $LAYERS | wc -w) layers and daemon/, $edges calls between them," \
        "none up, no cycle"
    exit 0
fi
# the first loop tsort names, and the calls between its modules
loop=$(awk '/input contains a loop/ { n++; next } n == 1 { sub(/^tsort: /, ""); print }' "$tmp/loop" | tr '\n' ' ')
echo "check_calls: the calls between the daemon's modules go round: $loop"
for a in $loop; do
    for b in $loop; do
        awk -v a="$a" -v b="$b" '$1 == a && $2 == b { print "  " a " -> " b ": " $3 }' "$tmp/calls"
    done
done
exit 1

#!/bin/sh
# check_includes.sh - the modules of daemon/ include each other without a cycle, so that each
# layer can be read, tested and changed knowing only the ones below it.
# A module is a basename (conn = conn.c + conn.h); a includes b when a.c or a.h has
# #include "b.h" (b != a). Fails naming the modules of a cycle when there is one.
# Run by `make check`, which sets $top_srcdir; run by hand it uses the script's parent dir.
set -u

top=${top_srcdir:-$(dirname "$0")/..}
edges=$(mktemp)
trap 'rm -f "$edges"' EXIT

headers=$(cd "$top/daemon" && ls *.h */*.h | sed 's#.*/##')
for f in "$top"/daemon/*.[ch] "$top"/daemon/*/*.[ch]; do
    a=$(basename "$f")
    a=${a%.*}
    sed -n 's/^#include "\([A-Za-z0-9_]*\)\.h".*/\1/p' "$f" | while read -r b; do
        [ "$b" != "$a" ] && echo "$headers" | grep -qx "$b.h" && echo "$a $b"
    done
done | sort -u > "$edges"

if [ ! -s "$edges" ]; then
    echo "FAIL: no includes found in $top/daemon"
    exit 1
fi

# Depth-first search from every module; a module met again while on the path closes a cycle.
cycle=$(awk '
    { out[$1] = out[$1] " " $2; node[$1]; node[$2] }
    function visit(n,    i, k, m, succ) {
        state[n] = 1
        path[++depth] = n
        k = split(out[n], succ, " ")
        for (i = 1; i <= k; i++) {
            m = succ[i]
            if (state[m] == 1) {
                for (j = 1; path[j] != m; j++)
                    ;
                s = ""
                for (; j <= depth; j++)
                    s = s path[j] " -> "
                print s m
                exit 0
            }
            if (state[m] == 0)
                visit(m)
        }
        depth--
        state[n] = 2
    }
    END { for (n in node) if (state[n] == 0) visit(n) }
' "$edges")

if [ -n "$cycle" ]; then
    echo "FAIL: daemon/ include cycle: $cycle"
    exit 1
fi
echo "PASS: $(wc -l < "$edges") includes between daemon/ modules, no cycle"

#!/bin/bash
# pairs/s through dlockd with min-replicas-ack 0 and 1, same run: one master with one replica,
# two dlockds on it (one each way), alternating. Run from the build directory: bench/results/issue15-ack/ackbench.sh
set -u
B=${B:-.}
T=$(mktemp -d /tmp/ackbench.XXXX)
R=${REDIS_SERVER:-/usr/bin/redis-server}
M=${PORT_BASE:-23000}
pids=()
cleanup() { for p in "${pids[@]}"; do kill $p 2>/dev/null; done; }
trap cleanup EXIT
$R --port $M --save "" --appendonly no --dir $T --repl-diskless-sync-delay 0 >$T/master.log 2>&1 & pids+=($!)
mkdir $T/replica
$R --port $((M + 1)) --save "" --appendonly no --dir $T/replica --replicaof 127.0.0.1 $M >$T/replica.log 2>&1 & pids+=($!)
sleep 2
$B/daemon/dlockd --listen 127.0.0.1:$((M + 10)) --redis 127.0.0.1:$M --log-level notice >$T/d0.log 2>&1 & pids+=($!); d0=$!
$B/daemon/dlockd --listen 127.0.0.1:$((M + 11)) --redis 127.0.0.1:$M --min-replicas-ack 1 --log-level notice >$T/d1.log 2>&1 & pids+=($!); d1=$!
sleep 1
for round in 1 2 3; do
 for c in 10 50 200; do
  for ack in 0 1; do
   d=$([ $ack = 0 ] && echo $d0 || echo $d1)
   $B/bench/dlock-bench --scenario pairs --target dlockd --dlockd 127.0.0.1:$((M + 10 + ack)) --redis 127.0.0.1:$M \
     --dlockd-pid $d --conns $c --duration 2 --warmup 0.5 --names 1000 --label "ack=$ack round=$round" 2>&1 | grep RESULT
  done
 done
done
grep -h "ack\|WAIT" $T/d1.log | head -5
echo logs $T

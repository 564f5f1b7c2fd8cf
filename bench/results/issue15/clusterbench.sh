#!/bin/bash
# pairs/s through dlockd on one Redis and on a 3-master Redis Cluster (one replica each), same run.
set -u
B=/work/main/_build-bench
T=$(mktemp -d /tmp/cbench.XXXX)
R=/usr/bin/redis-server
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 $p 2>/dev/null; done; }
trap cleanup EXIT
# single
$R --port 16379 --save "" --appendonly no --dir $T --daemonize no >$T/single.log 2>&1 & pids+=($!)
# cluster
for p in 17001 17002 17003 17004 17005 17006; do
  mkdir -p $T/$p; $R --port $p --cluster-enabled yes --cluster-config-file $T/$p/nodes.conf --cluster-node-timeout 2000 --save "" --appendonly no --dir $T/$p --daemonize no >$T/$p/log 2>&1 & pids+=($!)
done
sleep 1
yes yes | redis-cli --cluster create 127.0.0.1:17001 127.0.0.1:17002 127.0.0.1:17003 127.0.0.1:17004 127.0.0.1:17005 127.0.0.1:17006 --cluster-replicas 1 --cluster-yes >$T/create.log 2>&1
for i in $(seq 1 50); do redis-cli -p 17001 cluster info | grep -q 'cluster_state:ok' && break; sleep 0.2; done
sleep 2
$B/daemon/dlockd --listen 127.0.0.1:17411 --redis 127.0.0.1:16379 --log-level notice >$T/d1.log 2>&1 & pids+=($!); d1=$!
$B/daemon/dlockd --listen 127.0.0.1:17412 --cluster 127.0.0.1:17001 --cluster 127.0.0.1:17004 --log-level notice >$T/d2.log 2>&1 & pids+=($!); d2=$!
sleep 2
for round in 1 2 3; do
 for c in 10 50 200; do
  $B/bench/dlock-bench --scenario pairs --target dlockd --dlockd 127.0.0.1:17411 --redis 127.0.0.1:16379 --dlockd-pid $d1 --conns $c --duration 2 --warmup 0.5 --names 1000 --label "topo=single round=$round" 2>&1 | grep RESULT
  $B/bench/dlock-bench --scenario pairs --target dlockd --dlockd 127.0.0.1:17412 --redis 127.0.0.1:17001 --dlockd-pid $d2 --conns $c --duration 2 --warmup 0.5 --names 1000 --label "topo=cluster round=$round" 2>&1 | grep RESULT
 done
done
echo logs $T

# bench/plot.gp - latency against offered load, open loop, 50 connections, each offered
# rate run against dlockd and against direct Redis (gnuplot -e "data='...'; out='...'").
if (!exists("data")) data = 'bench/out/sweep.dat'
if (!exists("out")) out = 'bench/out/latency.png'
set terminal pngcairo size 900,560 noenhanced font ",11"
set output out
set title "LOCK+UNLOCK pair latency vs offered load (open loop, 50 connections, loopback)"
set xlabel "offered load (pairs/s)"
set ylabel "latency from intended start (ms)"
set logscale y
set grid
set key top left
plot data using 1:3 with linespoints lw 2 pt 7 lc rgb "#1f77b4" title "dlockd p50", \
     data using 1:4 with linespoints lw 2 pt 5 lc rgb "#1f77b4" dt 2 title "dlockd p99", \
     data using 1:6 with linespoints lw 2 pt 7 lc rgb "#d62728" title "direct Redis p50", \
     data using 1:7 with linespoints lw 2 pt 5 lc rgb "#d62728" dt 2 title "direct Redis p99"

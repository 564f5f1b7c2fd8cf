#!/usr/bin/env python3
"""failover.py - how long a client needs to resume its session on another dlockd after a kill -9.

Two dlockd share one redis-server; one `dlock run` job holds a lock through both (DLOCK_ADDR lists
them). KILLS times (default 100), the daemon the job is on is killed with SIGKILL and started
again; the time from the kill to the other daemon's "resumed" log line is one sample. After each
resume the lock must still be held by the job's session with its first token (kept), and at the
end the job must still run (jobs killed: 0).

    bench/failover.py BUILD_DIR [KILLS]      (make bench-failover runs it on the build's binaries)
"""
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

build = sys.argv[1] if len(sys.argv) > 1 else "."
kills = int(sys.argv[2]) if len(sys.argv) > 2 else 100
dlockd = os.path.join(build, "daemon", "dlockd")
dlock = os.path.join(build, "client", "dlock")
redis_bin = os.environ.get("REDIS_SERVER", "redis-server")
tmp = tempfile.mkdtemp(prefix="dlockd-failover.")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ask(port, line):
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(line.encode() + b"\n")
        return s.makefile().readline().strip()


def wait_ready(port):
    end = time.time() + 10
    while time.time() < end:
        try:
            if ask(port, "PING") == "OK":
                return
        except OSError:
            pass
        time.sleep(0.02)
    raise SystemExit("dlockd on port %d did not start" % port)


rport = free_port()
redis = subprocess.Popen([redis_bin, "--port", str(rport), "--save", "", "--appendonly", "no", "--dir", tmp],
                         stdout=subprocess.DEVNULL)
ports = [free_port(), free_port()]
procs = [None, None]


def start(i):
    log = open(os.path.join(tmp, "d%d.log" % i), "a")
    procs[i] = subprocess.Popen([dlockd, "--listen", "127.0.0.1:%d" % ports[i], "--redis", "127.0.0.1:%d" % rport,
                                 "--log-level", "info"], stderr=log)
    wait_ready(ports[i])


def resumed_lines(i):
    with open(os.path.join(tmp, "d%d.log" % i)) as f:
        return [l for l in f if "resumed from" in l]


def stamp(line):
    m = re.match(r"(\d+-\d+-\d+ \d+:\d+:\d+\.\d+)", line)
    return time.mktime(time.strptime(m.group(1)[:19], "%Y-%m-%d %H:%M:%S")) + float("0" + m.group(1)[19:])


try:
    time.sleep(0.3)
    start(0)
    start(1)
    env = dict(os.environ, DLOCK_ADDR="127.0.0.1:%d,127.0.0.1:%d" % tuple(ports), TZ="UTC")
    job = subprocess.Popen([dlock, "--ttl", "10s", "--name", "job", "run", "-w", "5s", "fo", "--", "sleep", "100000"],
                           env=env, stderr=open(os.path.join(tmp, "job.err"), "w"))
    time.sleep(0.5)
    first = ask(ports[1], "STATUS fo")
    token = re.search(r'"token":(\d+)', first).group(1)
    on, samples, kept, lost = 0, [], 0, 0
    for k in range(kills):
        other = 1 - on
        before = len(resumed_lines(other))
        procs[on].kill()
        t0 = time.time()
        procs[on].wait()
        end = t0 + 10
        while len(resumed_lines(other)) == before and time.time() < end:
            time.sleep(0.001)
        lines = resumed_lines(other)
        if len(lines) == before:
            lost += 1
            print("kill %d: no resume within 10 s" % k)
            break
        samples.append(max(0.0, stamp(lines[-1]) - t0) * 1000)
        st = ask(ports[other], "STATUS fo")
        if ('"token":%s' % token) in st:
            kept += 1
        else:
            lost += 1
        start(on)
        on = other
    alive = job.poll() is None
    samples.sort()
    if samples:
        p = lambda q: samples[min(len(samples) - 1, int(q * len(samples)))]
        print("failover: %d kills: resume after kill -9 p50 %.1f ms, p99 %.1f ms, max %.1f ms; holds kept %d, lost %d;"
              " jobs killed %d" % (len(samples), p(0.5), p(0.99), samples[-1], kept, lost, 0 if alive else 1))
    sys.exit(0 if alive and lost == 0 and len(samples) == kills else 1)
finally:
    for p in procs:
        if p and p.poll() is None:
            p.kill()
    if "job" in globals() and job.poll() is None:
        job.kill()
    redis.kill()

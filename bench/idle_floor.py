#!/usr/bin/env python3
"""idle_floor.py - the kernel's share of benchmark 3 (idle holds), measured without dlockd.

A server that does the least a server can do per heartbeat (epoll_wait, one recv, one send of
"OK\\r\\n" per line) takes SESSIONS connections that send "PING\\r\\n" RATE times a second in
all, spread evenly, as dlock-bench's idle scenario does (10 000 sessions, one heartbeat each
3333 ms). The system time of that server over WINDOW seconds is what the kernel costs for
those heartbeats on this machine, whatever the server: the floor under dlockd's figure. Its
user time is Python's and is not the point.

    python3 bench/idle_floor.py [SESSIONS [RATE [WINDOW]]]     (defaults 10000 3000 10)
"""
import heapq
import os
import random
import resource
import selectors
import socket
import sys
import time


def serve(ls):
    ep = selectors.EpollSelector()
    ep.register(ls, selectors.EVENT_READ)
    while True:
        for key, _ in ep.select():
            s = key.fileobj
            if s is ls:
                c, _ = ls.accept()
                c.setblocking(False)
                ep.register(c, selectors.EVENT_READ)
                continue
            try:
                data = s.recv(16384)
            except BlockingIOError:
                continue
            if not data:
                ep.unregister(s)
                s.close()
                continue
            n = data.count(b"\n")
            if n:
                s.send(b"OK\r\n" * n)


def cpu(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])  # utime, stime in clock ticks


def main():
    sessions = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
    rate = float(sys.argv[2]) if len(sys.argv) > 2 else 3000.0
    window = float(sys.argv[3]) if len(sys.argv) > 3 else 10.0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < sessions + 64:
        sys.exit("idle_floor: needs %d open files, the limit is %d" % (sessions + 64, hard))
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, sessions + 64)), hard))
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(4096)
    port = ls.getsockname()[1]
    pid = os.fork()
    if pid == 0:
        serve(ls)
        os._exit(0)
    ls.close()
    conns = []
    sel = selectors.DefaultSelector()
    for _ in range(sessions):
        c = socket.create_connection(("127.0.0.1", port))
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c.setblocking(False)
        sel.register(c, selectors.EVENT_READ)
        conns.append(c)
    period = sessions / rate
    start = time.monotonic() + 1.0
    due = [(start + random.random() * period, i) for i in range(sessions)]
    heapq.heapify(due)
    ticks = os.sysconf("SC_CLK_TCK")
    t0 = start + 2.0  # one period and more before the window: every connection sends
    end = t0 + window
    c0 = None
    sent = answered = 0
    while True:
        now = time.monotonic()
        if c0 is None and now >= t0:
            c0 = cpu(pid)
        if now >= end:
            c1 = cpu(pid)
            break
        while due[0][0] <= now:
            t, i = heapq.heappop(due)
            conns[i].send(b"PING\r\n")
            sent += c0 is not None
            heapq.heappush(due, (t + period, i))
        for key, _ in sel.select(max(0.0, min(due[0][0] - time.monotonic(), 0.01))):
            try:
                got = key.fileobj.recv(4096).count(b"\n")
                answered += got if c0 is not None else 0
            except BlockingIOError:
                pass
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    user = (c1[0] - c0[0]) / ticks / window * 100
    syst = (c1[1] - c0[1]) / ticks / window * 100
    print("idle_floor: %d sessions, %.0f heartbeats/s, %.0f s: the server's system time %.2f %% of a core "
          "(its user time, Python's: %.2f %%); %d heartbeats sent in the window, %d answered"
          % (sessions, rate, window, syst, user, sent, answered))


if __name__ == "__main__":
    main()

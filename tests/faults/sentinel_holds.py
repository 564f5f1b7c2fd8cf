#!/usr/bin/env python3
"""sentinel_holds.py - no lock lost on a Sentinel failover (issue 15): one master, two replicas and
three sentinels; two dlockd find the master through the sentinels. A session holds 50 locks, the
last 25 taken after both replicas lost their link to the master, so the replica promoted when
the master is killed (-9) lacks them; a competitor on the other dlockd keeps trying to take all
50 meanwhile. Checks: no LOCK of the competitor is granted any of them, the holder's connection
stays open and hears JEOPARDY then SAFE (no LOST, no BYE), every hold is there after with its
token, at least one was written back (the cut worked); reports the failover time (kill -> first
new grant). Environment: DLOCKD, REDIS_SERVER; KEEP=1 keeps the logs."""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import LineConn, dlockd_ping, free_port, redis_cmd, wait_for  # noqa: E402
from sentinels import Sentinels  # noqa: E402

NAMES = ["h%02d" % i for i in range(50)]
LEASE = "3s"


class Proc:
    def __init__(self, argv, out):
        self.argv, self.out, self.p = argv, out, None

    def start(self):
        with open(self.out, "ab") as f:
            self.p = subprocess.Popen(self.argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        return self

    def kill(self):
        if self.p and self.p.poll() is None:
            self.p.kill()
        if self.p:
            self.p.wait()

    def stop(self):
        if self.p and self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


class Client:
    """A dlockd connection that keeps events apart from replies."""

    def __init__(self, port, hello):
        self.c = LineConn(("127.0.0.1", port), timeout=2.0)
        self.events = []
        rep = self.ask("HELLO " + hello)
        assert rep.startswith("OK session="), rep

    def ask(self, line, timeout=20.0):
        self.c.send(line)
        deadline = time.monotonic() + timeout
        while True:
            rep = self.c.readline(max(0.0, deadline - time.monotonic()))
            if rep is None:
                raise TimeoutError("no reply to %r within %.0f s" % (line, timeout))
            if rep.startswith("* "):
                self.events.append((time.monotonic(), rep))
                continue
            return rep

    def drain(self, seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            line = self.c.readline(max(0.0, end - time.monotonic()))
            if line is None:
                return
            self.events.append((time.monotonic(), line))


def served(client, line, patience=20.0):
    """The answer to line, asked again while it is ERR BACKEND (nothing was done): on a loaded
    machine the sentinels may fail over a second time (a new master judged down within
    down-after-milliseconds), and the failover gate then closes again for a while."""
    end = time.monotonic() + patience
    while True:
        rep = client.ask(line)
        if not rep.startswith("ERR BACKEND") or time.monotonic() > end:
            return rep
        time.sleep(0.2)


def token(rep):
    return next(f.split("=", 1)[1] for f in rep.split() if f.startswith("token="))


def main():
    dlockd, redis = os.environ["DLOCKD"], os.environ.get("REDIS_SERVER", "redis-server")
    top = tempfile.mkdtemp(prefix="sentinel_holds.")
    topo, daemons, failed = None, [], []
    try:
        topo = Sentinels(top, redis, Proc).start()
        for i in range(2):
            port = free_port()
            daemons.append((Proc([dlockd, "--listen", "127.0.0.1:%d" % port, "--lock-lease", LEASE,
                                  "--log-level", "debug"] + topo.dlockd_args(),
                                 os.path.join(top, "dlockd%d.log" % i)).start(), port))
            wait_for(lambda: dlockd_ping(port), 10, "dlockd %d" % i)
        holder = Client(daemons[0][1], "name=holder ttl=60s")
        rival = Client(daemons[1][1], "name=rival ttl=60s")
        tokens = {}
        for n in NAMES[:25]:
            tokens[n] = token(holder.ask("LOCK " + n))
        cut_replicas(topo)
        for n in NAMES[25:]:
            holder.c.send("LOCK " + n)
        for n in NAMES[25:]:
            line = holder.c.readline(5.0)
            while line is not None and line.startswith("* "):
                holder.events.append((time.monotonic(), line))
                line = holder.c.readline(5.0)
            assert line and line.startswith("OK token="), "LOCK %s -> %r" % (n, line)
            tokens[n] = token(line)
        t_kill = time.monotonic()
        ms, new = run_failover(topo, rival, tokens, failed)
        t_grant = first_grant(rival, t_kill, failed)
        holder.drain(1.0)
        kept = 0
        for n in NAMES:
            rep = served(holder, "LOCK " + n)
            kept += rep == "OK token=%s count=2" % tokens[n]
            if rep != "OK token=%s count=2" % tokens[n]:
                failed.append("after the failover, LOCK %s by its holder -> %r (token was %s)" % (n, rep, tokens[n]))
            rep = served(rival, "LOCK " + n)
            if not rep.startswith("BUSY"):
                failed.append("after the failover, LOCK %s by the rival -> %r" % (n, rep))
        evs = [e for _, e in holder.events]
        if not any(e == "* JEOPARDY" for e in evs) or not any(e == "* SAFE" for e in evs):
            failed.append("the holder heard %r, not JEOPARDY then SAFE" % evs)
        bad = [e for e in evs if e.startswith("* LOST") or e.startswith("* BYE")]
        if bad:
            failed.append("the holder heard %r" % bad)
        with open(os.path.join(top, "dlockd0.log"), errors="replace") as f:
            back = f.read().count("written back to the new master")
        if back == 0:
            failed.append("no hold was written back: the promoted replica had them all (the cut failed)")
        print("sentinel failover: sentinels named the new master %d ms after the kill; first new grant %d ms "
              "after the kill; holds kept %d of 50 (%d written back), double grants %d" % (
                  ms, int((t_grant - t_kill) * 1000), kept, back, sum(1 for f in failed if "granted" in f)))
    finally:
        for p, _ in daemons:
            p.stop()
        if topo:
            topo.kill()
    for f in failed:
        print("FAIL - " + f)
    if failed or os.environ.get("KEEP"):
        print("logs kept in " + top)
    else:
        shutil.rmtree(top, ignore_errors=True)
    return 1 if failed else 0


def cut_replicas(topo):
    """The replicas lose their link to the master and cannot get it back (their reconnect fails
    AUTH): what the master does from now on, no replica sees. Connections already open, the
    daemons' and the sentinels', stay authenticated."""
    master = topo.master_port()
    s = socket.create_connection(("127.0.0.1", master), timeout=2.0)
    try:
        s.sendall(b"CONFIG SET requirepass cut-off\r\nCLIENT KILL TYPE replica\r\n")
        f = s.makefile("rb")
        for _ in range(2):
            line = f.readline()
            if line.startswith(b"-"):
                raise RuntimeError("cutting the replicas off: %r" % line)
    finally:
        s.close()
    for p in topo.ports:
        if p != master:
            wait_for(lambda: "master_link_status:down" in redis_cmd(p, "INFO", "replication"), 5,
                     "the replica on %d to lose its master" % p)


def run_failover(topo, rival, tokens, failed):
    """Kills the master; the rival tries every held name meanwhile (a grant is a double grant)."""
    import threading
    out = {}
    done = threading.Event()

    def nemesis():
        try:
            out["r"] = topo.fail_over()
        finally:
            done.set()
    threading.Thread(target=nemesis, daemon=True).start()
    while not done.is_set():
        time.sleep(0.01)
        for n in NAMES:
            rep = rival.ask("LOCK " + n)
            if rep.startswith("OK"):
                failed.append("LOCK %s granted to the rival during the failover: %r (held with token %s)" % (
                    n, rep, tokens[n]))
    if "r" not in out:
        raise RuntimeError("the failover did not happen")
    return out["r"]


def first_grant(rival, t_kill, failed):
    """Time of the first grant of a fresh name after the kill."""
    for i in range(600):
        rep = rival.ask("LOCK fresh%d" % i)
        if rep.startswith("OK"):
            return time.monotonic()
        time.sleep(0.05)
    failed.append("no new grant within 30 s of the failover")
    return time.monotonic()


if __name__ == "__main__":
    sys.exit(main())

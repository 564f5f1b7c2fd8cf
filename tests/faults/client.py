#!/usr/bin/env python3
"""client.py - one client of the fault-injection runs: a single-threaded process (so that
SIGSTOP freezes all of it, as a GC pause does) that loops over

  lock workload:      LOCK <name> wait=..  ->  READ from the fenced store with the token
                      ->  "work" for a while  ->  WRITE (read-modify-write) with the token
                      ->  UNLOCK <name>
  semaphore workload: ACQUIRE <sem> limit=L  ->  work  ->  RELEASE <sem>

and records every operation as invoke/complete with a monotonic timestamp, and every event
(* LOST, * JEOPARDY, * SAFE, * BYE, connection loss) with the time it was read.

The client is deliberately naive between its READ and its WRITE: it keeps reading the
connection during its work (so events are stamped when they arrive) but does not act on
them, and writes anyway. A real process can be paused right after checking that it still
holds the lock, so this is the case fencing tokens exist for; the store must refuse the
stale write.

It heartbeats with a tagged `#p PING` every ttl/3, also while a LOCK waits. When the
connection breaks it reconnects (retrying until it succeeds, on the next address of --dlockd
after a failure: a comma-separated list), resumes its session with HELLO session=ID secret=S
when a dlockd still has it, and releases what it held.
SIGTERM: finish the current iteration, QUIT, exit 0.
"""

import argparse
import os
import random
import select
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import LineConn, Recorder, kv, now_ns, parse_addr  # noqa: E402

stopping = False


class ConnLost(Exception):
    pass


class Dlock:
    """A connection to dlockd with its session, events and heartbeat."""

    def __init__(self, args, hist):
        self.a = args
        self.hist = hist
        self.addrs = [parse_addr(x) for x in args.dlockd.split(",")]
        self.cur = 0  # the address in use; a connection that fails moves on to the next
        self.hb_ns = args.ttl_ms * 1_000_000 // 3
        self.conn = None
        self.session = None
        self.secret = None
        self.next_hb = 0

    # -- connection
    def connect(self):
        """Connects (retrying forever, stop aside) and sends HELLO, resuming the old session
        when possible. Returns True when the old session was resumed."""
        delay = 0.05
        while True:
            try:
                self.conn = LineConn(self.addrs[self.cur], src=self.a.src, timeout=0.5)
                resumed = self.hello()
                self.next_hb = now_ns() + self.hb_ns
                return resumed
            except (OSError, EOFError, TimeoutError, ConnLost):
                if self.conn:
                    self.conn.close()
                self.conn = None
                if stopping and self.session is None:
                    raise ConnLost()
                self.cur = (self.cur + 1) % len(self.addrs)
                time.sleep(delay)
                delay = min(delay * 2, 0.4)

    def hello(self):
        base = "HELLO ttl=%dms name=%s" % (self.a.ttl_ms, self.a.id)
        if self.session:
            rep = self.raw_request("%s session=%s secret=%s" % (base, self.session, self.secret), 3.0)
            if rep.startswith("OK"):
                self.hist.rec(k="ev", e="RESUMED", sess=self.session)
                return True
        rep = self.raw_request(base, 3.0)
        if not rep.startswith("OK"):
            raise ConnLost()
        self.session = kv(rep, "session")
        self.secret = kv(rep, "secret")
        self.hist.rec(k="ev", e="SESSION", sess=self.session)
        return False

    def raw_request(self, line, timeout):
        """Request/reply during connect (events before the reply are recorded)."""
        self.conn.send(line)
        deadline = time.monotonic() + timeout
        while True:
            rep = self.conn.readline(max(0.0, deadline - time.monotonic()))
            if rep is None:
                raise TimeoutError()
            if rep.startswith("*"):
                self.event(rep)
                continue
            return rep

    def lost(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None
            self.hist.rec(k="ev", e="EOF")

    # -- events and heartbeat
    def event(self, line):
        p = line.split()
        e = p[1] if len(p) > 1 else "?"
        rec = dict(k="ev", e=e)
        if e == "LOST" and len(p) > 2:
            rec["n"] = p[2]
            tok = kv(line, "token")
            if tok is not None:
                rec["tok"] = int(tok)
            rec["why"] = kv(line, "reason")
        elif e == "BYE":
            rec["why"] = kv(line, "reason")
        self.hist.rec(**rec)

    def pump(self, until_ns, want_reply=False):
        """Reads lines until until_ns (monotonic ns), recording events and sending heartbeats.
        Returns the first untagged reply when want_reply, else None. Raises ConnLost."""
        if self.conn is None:
            raise ConnLost()
        while True:
            while self.conn.lines:
                line = self.conn.lines.pop(0)
                if line.startswith("*"):
                    self.event(line)
                    if line.startswith("* BYE"):
                        pass  # the connection closes next
                elif line.startswith("#"):
                    pass  # a heartbeat reply
                elif want_reply:
                    return line
            if self.conn.eof:
                self.lost()
                raise ConnLost()
            t = now_ns()
            if t >= self.next_hb:
                try:
                    self.conn.send("#p PING")
                except OSError:
                    self.lost()
                    raise ConnLost()
                self.next_hb = t + self.hb_ns
            if t >= until_ns:
                return None
            wait = min(until_ns, self.next_hb) - t
            r, _, _ = select.select([self.conn.sock], [], [], wait / 1e9)
            if r:
                self.conn.feed()

    def request(self, line, timeout_ms):
        """Sends an untagged request and waits for its reply (heartbeating). Raises ConnLost."""
        if self.conn is None:
            raise ConnLost()
        try:
            self.conn.send(line)
        except OSError:
            self.lost()
            raise ConnLost()
        self.next_hb = now_ns() + self.hb_ns
        rep = self.pump(now_ns() + timeout_ms * 1_000_000, want_reply=True)
        if rep is None:
            # No answer in time: treat the connection as broken (its requests are cancelled).
            self.hist.rec(k="ev", e="NOREPLY", req=line)
            self.lost()
            raise ConnLost()
        return rep

    def work(self, ms):
        """Naive work: reads events (stamped on arrival) but ignores them."""
        until = now_ns() + ms * 1_000_000
        if self.conn is None:
            time.sleep(ms / 1000)
            return
        try:
            self.pump(until)
        except ConnLost:
            left = until - now_ns()
            if left > 0:
                time.sleep(left / 1e9)

    def quit(self):
        if self.conn is not None:
            try:
                self.conn.send("QUIT")
                self.conn.readline(1.0)
            except (OSError, EOFError):
                pass
            self.conn.close()
            self.conn = None


class Store:
    def __init__(self, addr, src):
        self.addr = parse_addr(addr)
        self.src = src
        self.conn = None

    def request(self, line):
        for _ in range(50):
            try:
                if self.conn is None:
                    self.conn = LineConn(self.addr, src=self.src, timeout=1.0)
                return self.conn.request(line, 5.0)
            except (OSError, EOFError, TimeoutError):
                if self.conn:
                    self.conn.close()
                self.conn = None
                time.sleep(0.05)
        raise RuntimeError("fenced store unreachable")


def main():
    global stopping
    ap = argparse.ArgumentParser()
    ap.add_argument("--id", required=True)
    ap.add_argument("--gen", type=int, default=0)
    ap.add_argument("--daemon", type=int, default=0, help="index of the dlockd (for the checker)")
    ap.add_argument("--dlockd", required=True)
    ap.add_argument("--store", required=True)
    ap.add_argument("--src", default=None, help="source address to bind")
    ap.add_argument("--hist", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ttl-ms", type=int, default=2000)
    ap.add_argument("--locks", default="k0")
    ap.add_argument("--sem", default="s0")
    ap.add_argument("--sem-limit", type=int, default=2)
    ap.add_argument("--sem-ratio", type=float, default=0.25)
    ap.add_argument("--wait-ms", type=int, default=5000)
    ap.add_argument("--work-ms", default="100-400")
    ap.add_argument("--idle-ms", default="0-50")
    a = ap.parse_args()

    def on_term(*_):
        global stopping
        stopping = True
    signal.signal(signal.SIGTERM, on_term)

    rng = random.Random("%s/%s/%d" % (a.seed, a.id, a.gen))
    hist = Recorder(a.hist, c=a.id, g=a.gen, d=a.daemon)
    hist.rec(k="ev", e="START", pid=os.getpid())
    locks = a.locks.split(",")
    wlo, whi = (int(x) for x in a.work_ms.split("-"))
    ilo, ihi = (int(x) for x in a.idle_ms.split("-"))
    dl = Dlock(a, hist)
    store = Store(a.store, a.src)
    seq = 0
    held = {}  # name -> "lock" | "sem", what this client believes it holds on the session

    def opid():
        nonlocal seq
        seq += 1
        return "%s.%d.%d" % (a.id, a.gen, seq)

    def call(op, name, line, timeout_ms, **extra):
        """Invoke/complete around one dlockd request. Returns the reply or None (indeterminate)."""
        i = opid()
        hist.rec(k="inv", id=i, op=op, n=name, **extra)
        try:
            rep = dl.request(line, timeout_ms)
        except ConnLost:
            hist.rec(k="info", id=i, why="connection lost")
            return None, i
        if rep.startswith("OK"):
            tok = kv(rep, "token")
            rec = dict(k="ok", id=i, rep=rep)
            if tok is not None:
                rec["tok"] = int(tok)
            hist.rec(**rec)
        else:
            hist.rec(k="fail", id=i, rep=rep)
        return rep, i

    def pause(lo=50, hi=150):
        """Backs off after an error, still reading events and heartbeating."""
        dl.work(rng.randint(lo, hi))

    def release(name):
        """UNLOCK/RELEASE until dlockd says it is done (OK) or not held (ERR NOTHELD); an
        ERR BACKEND changed nothing, so try again. False when the connection broke."""
        kind = held.get(name)
        while True:
            if kind == "lock":
                rep, _ = call("unlock", name, "UNLOCK %s all" % name, 4000)
            else:
                rep, _ = call("release", name, "RELEASE %s permits=1" % name, 4000)
            if rep is None:
                return False
            if rep.startswith("OK") or rep.startswith("ERR NOTHELD"):
                held.pop(name, None)
                return True
            pause(100, 200)

    def release_all():
        """After a reconnect: release whatever the (resumed) session may still hold."""
        for name in list(held):
            if not release(name):
                return

    def ensure_conn():
        if dl.conn is None:
            dl.connect()
            release_all()

    dl.connect()
    while not stopping:
        try:
            ensure_conn()
        except ConnLost:
            break
        if rng.random() < a.sem_ratio:
            name = a.sem
            rep, _ = call("acquire", name, "ACQUIRE %s limit=%d wait=%dms" % (name, a.sem_limit, a.wait_ms),
                          a.wait_ms + 4000, limit=a.sem_limit)
            if rep is None:
                held[name] = "sem"  # maybe granted before the connection broke
                continue
            if not rep.startswith("OK"):
                if not rep.startswith("TIMEOUT"):
                    pause()
                continue
            held[name] = "sem"
            dl.work(rng.randint(wlo, whi))
            if dl.conn is not None:
                release(name)
        else:
            name = rng.choice(locks)
            rep, _ = call("lock", name, "LOCK %s wait=%dms" % (name, a.wait_ms), a.wait_ms + 4000)
            if rep is None:
                held[name] = "lock"
                continue
            if not rep.startswith("OK"):
                if not rep.startswith("TIMEOUT"):
                    pause()
                continue
            held[name] = "lock"
            tok = int(kv(rep, "token"))
            # read-modify-write on the fenced store, naive in between
            i = opid()
            hist.rec(k="inv", id=i, op="read", n=name, tok=tok)
            r = store.request("READ %s %d" % (name, tok))
            if r.startswith("OK"):
                base = int(kv(r, "ver"))
                hist.rec(k="ok", id=i, ver=base)
                dl.work(rng.randint(wlo, whi))
                i = opid()
                hist.rec(k="inv", id=i, op="write", n=name, tok=tok, base=base)
                w = store.request("WRITE %s %d %d %s" % (name, tok, base, i))
                if w.startswith("OK"):
                    hist.rec(k="ok", id=i, ver=int(kv(w, "ver")))
                else:
                    hist.rec(k="fail", id=i, rep=w)
            else:
                hist.rec(k="fail", id=i, rep=r)
            if dl.conn is not None:
                release(name)
        if ihi > 0 and not stopping:
            try:
                dl.work(rng.randint(ilo, ihi))
            except ConnLost:
                pass
    try:
        if dl.conn is None and held:
            dl.connect()
            release_all()
    except ConnLost:
        pass
    dl.quit()
    hist.rec(k="ev", e="EXIT")
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a late SIGTERM must not turn exit 0 into a kill


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""chaos.py - a chaos client for dlockd: a few dozen connections send random protocol
sequences (actors.py) over real sockets to the daemon of this build, while a nemesis pauses
redis-server (SIGSTOP/SIGCONT), kills it and starts it again empty or from an old snapshot.
Every line dlockd sends is checked as it arrives (wire.py: grammar, the reply the request may
get, replies lost while the connection stays open, closes without a reason); each round's
history is then checked for double grants, fencing tokens out of order, holds lost without a
* LOST (model.py); each daemon must log no sanitizer report, never leak a session secret and
exit 0 on SIGTERM. Some rounds run two or three daemons on the one Redis: sessions move between
them (resumers, actors.py), an operator KILLs and FORCEs, and audits compare the holds in Redis
with SESSIONS of every daemon (orphan, split, truth) and the resumers' ledgers (untold).

    chaos.py [--seconds S] [--seed N] [--out DIR] [--keep]

The run is rounds of about 35 s, each with a fresh dlockd and its own settings (requirepass,
lock-delay, session ttl). Environment: DLOCKD and REDIS_SERVER (paths), CHAOS_SECONDS (default
150), CHAOS_SEED (default: random, printed), CHAOS_ACTORS (default 24), CHAOS_VARIANTS (indexes
of VARIANTS to play, e.g. 1,3: the multi-daemon ones; default all in turn), CHAOS_OPEN (kinds of
finding still open, reported without failing; never crash, sanitizer, exit, secret or grammar). Exit status: 0 when
nothing was found, 1 when something was (with the seed to replay it), 2 when the setup failed.
"""

import argparse
import heapq
import json
import os
import random
import select
import shutil
import socket
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "faults"))
import actors  # noqa: E402
import model  # noqa: E402
import wire  # noqa: E402
from common import LineConn, free_port, redis_cmd, redis_ping  # noqa: E402
from faults import SANITIZER_MARKS, Proc  # noqa: E402

MS = 1_000_000
S = 1_000_000_000
ROUND_S = 36
DRAIN_S = 15
BACKEND_TIMEOUT_MS = 1000
BOUND_MS = 2 * BACKEND_TIMEOUT_MS + 4000     # a reply that needs no waiting comes within this
GATE_MS = 5000 + BACKEND_TIMEOUT_MS          # failover-delay after a restart: at least the longest reconnect
GRACE_MS = 5000 + GATE_MS + BOUND_MS         # after Redis is back: the reconnect backoff, the gate, then a reply
# The rounds take these in turn: a run of 150 s (4 rounds) has two with one dlockd and two
# with several sharing the Redis (sessions resumed across them, operator verbs).
VARIANTS = [
    dict(name="plain"),
    dict(name="3 daemons, adminpass", daemons=3, admin=True),
    dict(name="requirepass, lock-delay", password=True, lock_delay=400),
    dict(name="2 daemons, requirepass, lock-delay", daemons=2, admin=True, password=True, lock_delay=400),
    dict(name="requirepass", password=True),
    dict(name="lock-delay", lock_delay=400, session_ttl=2000),
]
MIX = ["worker"] * 14 + ["flaky"] * 5 + ["junk"] * 3 + ["thief"] * 2
# With several daemons: resumers and an operator take the places of some workers.
MULTI_MIX = ["worker"] * 10 + ["resumer"] * 6 + ["flaky"] * 3 + ["junk"] * 2 + ["thief"] * 2 + ["operator"]
FAILOVER_MS = 1500   # failover-delay of the multi-daemon rounds: the gate after a Redis restart


def log(msg):
    print("chaos: " + msg, flush=True)


class Redis:
    """The redis-server of the run, which the nemesis pauses, kills and starts again."""

    def __init__(self, binary, tmp):
        self.binary, self.tmp = binary, tmp
        self.port = free_port()
        self.proc = None

    def start(self, keep_data):
        if not keep_data:
            try:
                os.unlink(os.path.join(self.tmp, "dump.rdb"))
            except FileNotFoundError:
                pass
        self.proc = Proc([self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                          "--appendonly", "no", "--dir", self.tmp, "--dbfilename", "dump.rdb"],
                         os.path.join(self.tmp, "redis.log")).start()

    def ready(self):
        return redis_ping(self.port, timeout=0.2)

    def restore(self):
        """Running and answering again (a round may end in the middle of a fault)."""
        if self.proc.paused:
            self.proc.resume()
        if not self.proc.alive():
            self.start(keep_data=False)
        deadline = time.monotonic() + 10
        while not self.ready():
            if time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.05)


class Nemesis:
    """One fault at a time: pause (short or past the lock-lease), restart empty, restart from a
    snapshot taken a few seconds before; waits for dlockd to be SAFE again before the next."""

    def __init__(self, drv, rng):
        self.drv, self.rng = drv, rng
        self.state = "idle"
        self.t = drv.now() + rng.randint(2500, 5000) * MS
        self.saved = False
        self.kind = None
        self.count = {}

    def tick(self, now):
        d, r = self.drv, self.drv.redis
        if now < self.t:
            return
        if self.state == "idle" and not d.stopping_faults:
            if d.multi:  # several daemons: restarts (empty) behind the failover gate while sessions move
                k = self.rng.choice(["pause", "pause-long", "restart-empty", "restart-empty"])
            else:
                k = self.rng.choice(["pause", "pause", "pause-long", "restart-empty", "restart-old", "save"])
            if k == "restart-old" and not self.saved:
                k = "save"
            self.count[k] = self.count.get(k, 0) + 1
            if k == "save":
                redis_cmd(r.port, "SAVE")
                self.saved = True
                self.t = now + self.rng.randint(500, 3000) * MS
                return
            d.down(k)
            if k.startswith("pause"):
                r.proc.pause()
                self.state = "paused"
                self.t = now + (self.rng.randint(200, 900) if k == "pause" else self.rng.randint(2500, 4500)) * MS
            else:
                d.record(dict(k="redis", what="lost", t=d.now(), empty=k == "restart-empty"))
                r.proc.kill()
                self.saved = False
                self.state = "dead"
                self.t = now + self.rng.randint(0, 1500) * MS
                self.kind = k
        elif self.state == "paused":
            r.proc.resume()
            self.state = "waking"
        elif self.state == "dead":
            r.start(keep_data=self.kind == "restart-old")
            self.state = "waking"
        elif self.state == "waking":
            if r.ready():
                d.up()
                self.state = "recovering"
                self.since = now
            else:
                self.t = now + 50 * MS
        elif self.state == "recovering":
            if d.daemon_safe():
                self.state = "idle"
                # several daemons: longer calm stretches, for the audits of chaos.py
                self.t = now + (self.rng.randint(3000, 9000) if d.multi else self.rng.randint(1500, 5000)) * MS
            elif now - self.since > 20 * S:
                d.violation("backend", "dlockd not back to SAFE 20 s after Redis came back")
                self.state = "idle"
            else:
                self.t = now + 200 * MS

    def settle(self, now):
        """Ends a fault at once (the round is draining)."""
        if self.state in ("paused", "dead"):
            self.t = now
            self.tick(now)

    def quiet(self):
        return self.state == "idle"


class Driver:
    def __init__(self, args, seed, rnd, variant, out):
        self.args, self.seed, self.rnd, self.variant, self.out = args, seed, rnd, variant, out
        self.rng = random.Random("%s/%d" % (seed, rnd))
        self.password = ("pw-%d" % self.rng.randint(0, 1 << 30)) if variant.get("password") else None
        self.secrets = None
        self.secret_owner = {}  # secret -> session id
        self.cfg = dict(session_ttl_ms=variant.get("session_ttl", 3000), ttl_min_ms=1000, ttl_max_ms=3600000,
                        max_line=4096, preauth_max_line=512, lock_lease_ms=3000, lock_delay_ms=variant.get(
                            "lock_delay", 0))
        self.daemons = []
        self.multi = variant.get("daemons", 1) > 1
        self.adminpass = ("admin-%d" % self.rng.randint(0, 1 << 30)) if variant.get("admin") else None
        self.records = []
        self.violations = []
        self.conns = {}
        self.sessions = []
        self.timers = []
        self.outages = []       # [down, up or None]
        self.stopping = False
        self.stopping_faults = False
        self.ncid = 0
        self.nreq = 0
        self.stats = dict(requests=0, replies=0, events=0, connections=0, audits=0, checks=0)

    # -- processes
    def start(self, redis):
        self.redis = redis
        for k in range(self.variant.get("daemons", 1)):
            self.daemons.append(self.start_one(k))
        self.daemon = self.daemons[0]
        self.port = self.daemon.port

    def start_one(self, k):
        port = free_port()
        logpath = os.path.join(self.out, "dlockd-%d%s.log" % (self.rnd, "" if k == 0 else chr(ord("a") + k)))
        argv = [self.args.dlockd, "--listen", "127.0.0.1:%d" % port, "--redis", "127.0.0.1:%d" % self.redis.port,
                "--session-ttl", "%dms" % self.cfg["session_ttl_ms"], "--lock-lease", "3s", "--backend-timeout",
                "%dms" % BACKEND_TIMEOUT_MS, "--auth-fail-delay", "100ms", "--log-level", "debug"]
        if self.password:
            argv += ["--requirepass", self.password]
        if self.adminpass:
            argv += ["--adminpass", self.adminpass]
        if self.multi:
            argv += ["--failover-delay", "%dms" % FAILOVER_MS]
        if self.cfg["lock_delay_ms"]:
            argv += ["--lock-delay", "%dms" % self.cfg["lock_delay_ms"]]
        proc = Proc(argv, logpath).start()
        proc.port, proc.logpath, proc.idx = port, logpath, k
        if k == 0:
            self.logpath = logpath
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return proc
            except OSError:
                if not proc.alive():
                    break
                time.sleep(0.05)
        proc.kill()
        raise RuntimeError("dlockd did not start (see %s)" % logpath)

    def ask(self, port, lines, admin=False):
        """A short blocking exchange with one daemon (AUTH first when needed): the replies."""
        c = LineConn(("127.0.0.1", port), timeout=1.0)
        out = []
        try:
            pw = self.adminpass if admin else self.password
            for line in (["AUTH " + pw] if pw else []) + lines:
                c.send(line)
                rep = "*"
                while rep.startswith("*"):
                    rep = c.readline(2.0)
                    if rep is None:
                        raise TimeoutError(line)
                out.append(rep)
        finally:
            c.close()
        return out[1:] if pw else out

    def daemon_safe(self):
        """True when INFO of every daemon says the backend is up and nobody is in jeopardy."""
        for dm in self.daemons:
            try:
                info = json.loads(self.ask(dm.port, ["INFO"])[-1][3:])
            except (OSError, EOFError, TimeoutError, ValueError):
                return False
            if info.get("backend") != "up" or info.get("jeopardy"):
                return False
        return True

    # -- what wire.py and actors.py call
    def now(self):
        return time.monotonic_ns()

    def record(self, rec):
        rec.setdefault("t", self.now())
        self.records.append(rec)

    def record_req(self, r):
        self.nreq += 1
        r["r"] = self.nreq
        self.stats["requests"] += 1
        rec = dict(k="req", r=r["r"], c=r["c"], t=r["t"], s=r["s"], line=r["line"].decode("latin-1"), tc=r["tc"])
        for k in ("verb", "names", "mode", "owner", "wait", "lease", "permits", "limit", "id", "all", "session",
                  "ttl", "wellformed"):
            if r.get(k) is not None:
                rec[k] = r[k]
        if r.get("target") is not None:
            rec["target"] = r["target"].idx
        if r.get("victim") is not None:
            rec["victim"] = r["victim"].idx
        if r.get("amb") is not None:
            rec["amb"] = r["amb"]
        self.records.append(rec)

    def violation(self, kind, msg, conn=None):
        self.violations.append((kind, msg))
        if conn is not None and conn.state not in ("closed", "eof"):
            conn.broken = True
            conn.doomed = conn.doomed or "violation"
            self.after(200, lambda: conn.close("after a violation"))

    def leak_check(self, conn, line, r=None):
        for secret, owner in self.secret_owner.items():
            if secret in line and not (r is not None and r.fields.get("secret") == secret and
                                       r.fields.get("session") == owner):
                self.violation("secret", "c%d: the secret of session %s in %r" % (conn.cid, owner, line))

    def bound(self, r):
        if r["tc"] == "none" or r.get("wait") == "inf":
            return None
        b = BOUND_MS
        if wire.may_wait(r):
            b += r["wait"]
        return b * MS

    def deadline(self, start, bound, redis=True):
        """When a reply is overdue; a request that needs Redis gets more time after an outage,
        and when sent while the gate after a restart may still hold it back."""
        d = start + bound
        for down, up in self.outages if redis else ():
            if down <= d and (up is None or up + (5000 + GATE_MS) * MS >= start):
                if up is None:
                    return float("inf")
                d = max(d, up + GRACE_MS * MS)
        return d

    def down(self, why):
        t = self.now()
        self.outages.append([t, None])
        self.record(dict(k="redis", what="down", t=t, why=why))

    def up(self):
        t = self.now()
        for o in self.outages:
            if o[1] is None:
                o[1] = t
        self.record(dict(k="redis", what="up", t=t))

    def after(self, ms, fn):
        heapq.heappush(self.timers, (self.now() + ms * MS, id(fn), fn))

    def connect(self, actor, wild=False, daemon=None):
        """A new connection of actor's to daemon (an index; by default one at random)."""
        if daemon is None:
            daemon = actor.rng.randrange(len(self.daemons)) if len(self.daemons) > 1 else 0
        dm = self.daemons[daemon]
        try:
            sock = socket.create_connection(("127.0.0.1", dm.port), timeout=1.0)
        except OSError:
            return None
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.ncid += 1
        sess = wire.Sess(len(self.sessions))
        self.sessions.append(sess)
        conn = wire.Conn(self, self.ncid, sock, actor, sess, wild)
        conn.dmn = dm
        conn.authed = True if self.password is None else False
        sess.conn = conn
        self.conns[conn.cid] = conn
        self.stats["connections"] += 1
        self.record(dict(k="open", c=conn.cid, s=sess.idx, t=conn.opened, wild=wild, port=sock.getsockname()[1],
                         d=daemon))
        return conn

    def detach(self, conn):
        if conn.sess is not None and conn.sess.conn is conn:
            conn.sess.conn = None

    def hello_ok(self, conn, req, r, t):
        f = r.fields
        sid, secret = f.get("session"), f.get("secret")
        if req.get("session"):
            s = next((x for x in self.sessions if x.id == sid), None)
            if sid != req["session"] or s is None:
                return self.violation("reply", "c%d: resumed session %s when %s was asked" % (
                    conn.cid, sid, req["session"]), conn)
            old = s.conn
            if old is not None and old is not conn and old.state in ("open", "shut"):
                old.doomed = "moved"
                old.moved_by = t + 3 * S
                old.moved_at = t
                old.loose = 0 if old.loose is None else old.loose  # its waits end without a reply
                old.moved_from = s
                old.sess = wire.Sess(len(self.sessions))
                self.sessions.append(old.sess)
            self.detach(conn)
            conn.sess, s.conn = s, conn
            self.record(dict(k="attach", c=conn.cid, s=s.idx, t=t))
            if conn.actor.conn is conn:
                conn.actor.sess = s
        else:
            s = conn.sess
            if s.id is None:
                s.id = sid
                self.record(dict(k="sess", s=s.idx, id=sid, t=t))
                if self.secrets is None:
                    self.secrets = secret is not None
                    log("round %d: the server %s session secrets" % (self.rnd, "hands out" if self.secrets else
                                                                       "does not hand out (yet)"))
                elif self.secrets != (secret is not None):
                    self.violation("reply", "c%d: a new session's HELLO reply %s secret= unlike the first" % (
                        conn.cid, "without" if self.secrets else "with"), conn)
            elif s.id != sid:
                return self.violation("reply", "c%d: HELLO names session %s, the connection has %s" % (
                    conn.cid, sid, s.id), conn)
        if secret:
            s.secret = secret
            self.secret_owner[secret] = sid
        s.ttl = int(f["ttl"])

    # -- what Redis and the daemons' operator verbs say (several daemons)
    def calm(self, since):
        """The nemesis idle, and Redis up from a lease and a gate before `since` until now (what
        was left in Redis by a session that ended while Redis was away lapses by then)."""
        if not self.nemesis.quiet():
            return False
        last = max([o[1] or float("inf") for o in self.outages] + [0])
        return last < since - (3000 + FAILOVER_MS + 1000) * MS

    def redis_holds(self):
        """{(name, hid): (token, daemon)} of the holds in Redis whose lease still runs."""
        port = self.redis.port
        sec, usec = redis_cmd(port, "TIME", timeout=1.0)
        now_ms = int(sec) * 1000 + int(usec) // 1000
        out, cur = {}, "0"
        while True:
            cur, keys = redis_cmd(port, "SCAN", cur, "MATCH", "dlock:{*}:[hk]", "COUNT", "1000", timeout=1.0)
            for k in keys:
                name = k[len("dlock:{"):-len("}:h")]
                if k.endswith("}:k"):  # the one-key form: "end hid value"
                    v = redis_cmd(port, "GET", k, timeout=1.0) or ""
                    f = v.split(" ")
                    if len(f) >= 8 and int(f[0]) > now_ms + 200:
                        out[(name, f[1])] = (int(f[3]), f[7])
                    continue
                h = redis_cmd(port, "HGETALL", k, timeout=1.0) or []
                x = redis_cmd(port, "ZRANGE", "dlock:{%s}:x" % name, "0", "-1", "WITHSCORES", timeout=1.0) or []
                ends = dict(zip(x[0::2], x[1::2]))
                for hid, val in zip(h[0::2], h[1::2]):
                    f = val.split(" ")
                    if float(ends.get(hid, 0)) > now_ms + 200 and len(f) >= 6:
                        out[(name, hid)] = (int(f[1]), f[5])
            if cur == "0":
                return out

    def daemon_sessions(self):
        """[(daemon id, {session id})] from SESSIONS of each daemon."""
        out = []
        for dm in self.daemons:
            o = json.loads(self.ask(dm.port, ["SESSIONS limit=1000"], admin=True)[-1][3:])
            out.append((o["sessions"][0]["daemon"] if o["sessions"] else "?",
                        {x["session"] for x in o["sessions"]}))
        return out

    def snapshot(self):
        try:
            return self.now(), self.redis_holds(), self.daemon_sessions()
        except (OSError, EOFError, TimeoutError, ValueError, RuntimeError, IndexError, KeyError):
            return None

    def audit_start(self, now):
        """Two snapshots 0.8 s apart at a calm moment; what holds in both is a finding."""
        self.next_audit = now + self.rng.randint(4000, 8000) * MS
        if not self.calm(now):
            return
        a = self.snapshot()
        if a is not None:
            self.after(800, lambda: self.audit_end(a))

    def audit_end(self, a):
        if not self.calm(a[0]):
            return
        b = self.snapshot()
        if b is not None and self.calm(a[0]):
            self.stats["audits"] += 1
            self.audit(a, b)

    def audit(self, a, b, final=False):
        """orphan: a hold whose lease runs and whose session no daemon has, or whose daemon is not
        the one that has its session; split: a session two daemons have; truth: a name a resumer was
        told it released, still held by its session."""
        when = "at the end of the round" if final else "at %.3f-%.3f s" % ((a[0] - self.t0) / S, (b[0] - self.t0) / S)
        where = {}
        for snap in (a, b):
            for did, sids in snap[2]:
                for sid in sids:
                    where.setdefault(sid, [set(), set()])[snap is b].add(did)
        for sid, (wa, wb) in where.items():
            if len(wa) > 1 and len(wb) > 1:
                self.violation("split", "session %s is on %d daemons (%s) %s" % (sid, len(wb), ", ".join(sorted(wb)),
                                                                                 when))
        for key, (tok, dmn) in b[1].items():
            if a[1].get(key, (None,))[0] != tok or dmn == "-":
                continue
            name, hid = key
            sid = hid[1:17]
            wa, wb = where.get(sid, [set(), set()])
            if not wa and not wb:
                self.violation("orphan", "%s %s token=%d (daemon %s) is held in Redis by session %s, which no daemon "
                               "has, %s" % ({"x": "lock", "s": "shared lock", "p": "semaphore"}.get(hid[0], "?"), name,
                                             tok, dmn, sid, when))
            elif dmn not in wa and dmn not in wb:
                self.violation("orphan", "%s token=%d is held in Redis by session %s for daemon %s, but the session "
                               "is on %s, %s" % (name, tok, sid, dmn, ", ".join(sorted(wa | wb)), when))
        for act in self.actors:
            for name, (t, sid) in getattr(act, "released", {}).items():
                key = next((k for k in b[1] if k[0] == name and k[1][1:17] == sid), None)
                pend = any(r.get("verb") == "LOCK" and name in r["names"] for c in self.conns.values()
                           if c.actor is act for r in c.pending())
                if t < a[0] - 300 * MS and key and key in a[1] and act.lock_sent.get(name, 0) < t and not pend:
                    self.violation("truth", "%s (%s) was told it released %s at %.3f s, yet session %s holds it "
                                   "(token %d) %s" % (act.name, sid, name, (t - self.t0) / S, sid, b[1][key][0], when))

    def final_audit(self):
        """End of the round: the audit once the clients are quiet, and the holds resumers lost
        without a word."""
        end = self.now() + 20 * S
        while not self.calm(self.now()) and self.now() < end:
            e = self.now() + 500 * MS
            self.loop(lambda: e, False)
        if self.calm(self.now()):
            a = self.snapshot()
            e = self.now() + 800 * MS
            self.loop(lambda: e, False)
            b = self.snapshot()
            if a is not None and b is not None:
                self.stats["audits"] += 1
                self.audit(a, b, final=True)
        for act in self.actors:
            for msg in getattr(act, "untold", lambda: [])():
                self.violation("untold", "%s: %s" % (act.name, msg))

    def gone_check(self, what, sid, t, unless=None):
        """After `what` was answered OK at t: no hold of session sid may be left in Redis."""
        def check():
            if not self.calm(t) or self.stopping or (unless is not None and unless()):
                return
            try:
                holds = self.redis_holds()
            except (OSError, EOFError, TimeoutError, ValueError, RuntimeError):
                return
            if not self.calm(t):
                return
            self.stats["checks"] += 1
            left = ["%s token=%d (daemon %s)" % (k[0], tok, dmn) for k, (tok, dmn) in sorted(holds.items())
                    if k[1][1:17] == sid and dmn != "-"]
            if left:
                w = what() if callable(what) else what
                self.violation("orphan" if w.startswith("KILL") else "truth", "%s answered OK at %.3f s, yet 1.5 s "
                               "later session %s still holds %s in Redis" % (w, (t - self.t0) / S, sid,
                                                                              ", ".join(left)))
        self.after(1500, check)

    def kill_check(self, victim, req, t):
        self.gone_check("KILL %s" % victim.id, victim.id, t)

    def quit_check(self, actor, sid, hello, req, t):
        """A QUIT pipelined behind HELLO session=sid answered OK: that session ended (unless the
        resume was refused: then the QUIT ended the connection's own session)."""
        what = lambda: "%r sent behind %r (%s; the HELLO answered %s)" % (
            req["line"].decode(), hello["line"].decode()[:40] + "...", actor.name, hello.get("answer") or "nothing")
        self.gone_check(what, sid, t, unless=lambda: hello.get("answer") in ("NOSESSION", "BACKEND", "NOAUTH"))

    # -- the loop
    def read_all(self):
        """Reads every connection until a whole pass finds nothing; stamps what it read with
        the time that pass began, so the stamps keep the order in which dlockd wrote lines
        to different connections."""
        got = {}
        eofs = set()
        while True:
            t = self.now()
            anything = False
            for c in list(self.conns.values()):
                if c.state not in ("open", "shut") or c in eofs:
                    continue
                while True:
                    try:
                        data = c.sock.recv(65536)
                    except (BlockingIOError, InterruptedError):
                        break
                    except OSError:
                        data = b""
                    if not data:
                        eofs.add(c)
                        anything = True
                        break
                    got.setdefault(c, []).append(data)
                    anything = True
            if not anything:
                break
        for c, chunks in got.items():
            if c.state in ("open", "shut"):
                c.feed(b"".join(chunks), t)
        for c in eofs:
            c.eof(t)
            self.close_sock(c)

    def close_sock(self, c):
        try:
            c.sock.close()
        except OSError:
            pass
        self.conns.pop(c.cid, None)

    def checks(self, now):
        for c in list(self.conns.values()):
            if c.state == "closed":
                self.conns.pop(c.cid, None)
                continue
            r = c.overdue(now)
            if r is not None and not self.stopping:
                self.violation("lost", "c%d: no reply to %r within %.1f s (sent at %.3f s)" % (
                    c.cid, r["line"][:120], (now - r["start"]) / S, (r["t"] - self.t0) / S), c)
                c.close("reply overdue")
                continue
            if c.moved_by is not None and now > c.moved_by:
                c.moved_by = None
                self.violation("moved", "c%d: its session was resumed on another connection %s; no * BYE "
                               "reason=moved and no close within 3 s" % (c.cid, "3 s ago"))
                c.close("not moved")
            elif c.shut_t is not None and c.state == "shut":
                b = max([r["bound"] for r in c.pending() if r["bound"]] + [BOUND_MS * MS])
                if now > self.deadline(c.shut_t, b) and not self.stopping:
                    self.violation("lost", "c%d: half-closed %.1f s ago and never closed by the server; %s" % (
                        c.cid, (now - c.shut_t) / S, c.pending_text()), c)
                    c.close("half-close overdue")

    def loop(self, until, acting):
        while True:
            now = self.now()
            if now >= until():
                return
            while self.timers and self.timers[0][0] <= now:
                heapq.heappop(self.timers)[2]()
            self.nemesis.tick(now)
            if self.multi and now >= self.next_audit and not self.stopping_faults:
                self.audit_start(now)
            for a in self.actors:
                if now >= a.next_t:
                    if acting:
                        a.step(now)
                    else:
                        a.heartbeat(now)
            self.checks(now)
            for dm in self.daemons:
                if not dm.alive():
                    raise Crash("dlockd %s exited with status %s during the round" % (dm.logpath, dm.p.returncode))
            socks = [c.sock for c in self.conns.values() if c.state in ("open", "shut")]
            wsocks = [c.sock for c in self.conns.values() if c.out and c.state == "open"]
            nxt = min([a.next_t for a in self.actors] + [self.timers[0][0] if self.timers else now + 50 * MS,
                                                         now + 50 * MS])
            try:
                _, w, _ = select.select(socks, wsocks, [], max(0, nxt - now) / S)
            except (ValueError, OSError):
                w = []
            for c in list(self.conns.values()):
                if c.sock in w:
                    c.flush()
            self.read_all()

    def run(self):
        self.t0 = self.now()
        self.record(dict(k="start", t=self.t0))
        self.nemesis = Nemesis(self, random.Random("%s/%d/nemesis" % (self.seed, self.rnd)))
        n = int(os.environ.get("CHAOS_ACTORS", "24"))
        base = MULTI_MIX if self.multi else MIX
        mix = base * (n // len(base) + 1)
        self.actors = [actors.KINDS[mix[i]](self, "%s%d" % (mix[i], i), mix[i],
                                            random.Random("%s/%d/%d" % (self.seed, self.rnd, i))) for i in range(n)]
        active_end = self.t0 + self.args.round_s * S
        self.next_audit = self.now() + 6 * S
        self.loop(lambda: active_end, True)
        # drain: no more faults, no new requests but heartbeats; wait for the replies still due
        self.stopping_faults = True
        self.nemesis.settle(self.now())
        drain_end = self.now() + DRAIN_S * S
        self.loop(lambda: drain_end if self.draining() else 0, False)
        if self.multi:
            self.final_audit()
        self.record(dict(k="end", t=self.now()))
        self.stopping = True

    def draining(self):
        if not self.nemesis.quiet():
            return True
        return any(r["bound"] is not None for c in self.conns.values() for r in c.pending()
                   if c.state in ("open", "shut"))

    def stop(self):
        """SIGTERM: every connection must see * BYE reason=shutdown or a close, and each dlockd exit 0."""
        problems = []
        for dm in self.daemons:
            if dm.alive():
                dm.p.send_signal(15)
        end = self.now() + 15 * S
        while self.conns and self.now() < end:
            socks = [c.sock for c in self.conns.values() if c.state in ("open", "shut")]
            if not socks:
                break
            select.select(socks, [], [], 0.1)
            self.read_all()
        for dm in self.daemons:
            problems += self.stop_one(dm)
        for c in list(self.conns.values()):
            self.close_sock(c)
        return problems

    def stop_one(self, dm):
        problems = []
        st, killed = dm.stop(timeout=15.0, term=False)
        if killed:
            problems.append(("exit", "dlockd (%s) did not exit within 15 s of SIGTERM" % dm.logpath))
        elif st != 0:
            problems.append(("exit", "dlockd (%s) exited with status %s on SIGTERM" % (dm.logpath, st)))
        with open(dm.logpath, errors="replace") as f:
            text = f.read()
        for m in SANITIZER_MARKS + ("runtime error",):
            if m in text:
                i = text.index(m)
                problems.append(("sanitizer", "%s has %r: %s" % (dm.logpath, m, text[max(0, i - 200):i + 600])))
                break
        for secret, owner in self.secret_owner.items():
            if secret in text:
                problems.append(("secret", "the secret of session %s is in %s" % (owner, dm.logpath)))
        if self.adminpass and self.adminpass in text:
            problems.append(("secret", "the adminpass is in %s" % dm.logpath))
        return problems


# A crash, a sanitizer report, an unclean exit, a leaked secret or a line that breaks the
# protocol's grammar fails a run whatever CHAOS_OPEN says.
HARD = {"crash", "sanitizer", "exit", "secret", "grammar"}


class Crash(Exception):
    pass


def summarize(kinds):
    return ", ".join("%s %d" % (k, n) for k, n in sorted(kinds.items())) or "none"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=int(os.environ.get("CHAOS_SECONDS") or 150))
    ap.add_argument("--seed", type=int, default=int(os.environ["CHAOS_SEED"]) if os.environ.get("CHAOS_SEED")
                    else random.SystemRandom().randint(1, 999999))
    ap.add_argument("--out", default=None)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--open", default=os.environ.get("CHAOS_OPEN", ""),
                    help="comma-separated kinds of finding still open: reported, but not failing the run")
    a = ap.parse_args()
    a.open = [k.strip() for k in a.open.split(",") if k.strip()]
    hard = set(a.open) & HARD
    if hard:
        ap.error("these kinds always fail a run: %s" % ", ".join(sorted(hard)))
    a.dlockd = os.environ.get("DLOCKD") or os.path.join(HERE, "..", "..", "daemon", "dlockd")
    a.redis = os.environ.get("REDIS_SERVER") or shutil.which("redis-server")
    rounds = max(1, round(a.seconds / ROUND_S))
    # CHAOS_VARIANTS=1,3 plays only those settings (indexes into VARIANTS), in turn
    order = [VARIANTS[int(x)] for x in os.environ.get("CHAOS_VARIANTS", "").split(",") if x.strip()] or VARIANTS
    a.round_s = max(5, a.seconds / rounds - 6)
    out = a.out or tempfile.mkdtemp(prefix="dlockd-chaos.")
    os.makedirs(out, exist_ok=True)
    log("seed %d (replay: CHAOS_SEED=%d CHAOS_SECONDS=%d), %d round(s), logs in %s" % (
        a.seed, a.seed, a.seconds, rounds, out))
    if not a.redis or not os.access(a.dlockd, os.X_OK):
        log("setup: need DLOCKD (%s) and redis-server (%s)" % (a.dlockd, a.redis))
        return 2
    redis = Redis(a.redis, out)
    redis.start(keep_data=False)
    found = []
    try:
        for rnd in range(rounds):
            try:
                redis.restore()
            except RuntimeError as e:
                log("setup: %s" % e)
                return 2
            variant = order[rnd % len(order)]
            drv = Driver(a, a.seed, rnd, variant, out)
            try:
                drv.start(redis)
            except RuntimeError as e:
                log("setup: %s" % e)
                for dm in drv.daemons:
                    dm.kill()
                return 2
            log("round %d (%s): %.0f s" % (rnd, variant["name"], a.round_s))
            try:
                drv.run()
            except Crash as e:
                drv.violation("crash", str(e))
                drv.stopping = True
            probs = drv.stop()
            v = drv.violations + probs
            with open(os.path.join(out, "round-%d.jsonl" % rnd), "w") as f:
                for rec in drv.records:
                    f.write(json.dumps(rec, separators=(",", ":")) + "\n")
            v += model.check(drv.records, drv.cfg)
            with open(os.path.join(out, "findings-%d.txt" % rnd), "w") as f:
                f.writelines("[%s] %s\n" % kv for kv in v)
            kinds = {}
            for k, _ in v:
                kinds[k] = kinds.get(k, 0) + 1
            extra = ""
            if drv.multi:
                extra = ", %d audits, %d checks after KILL or QUIT" % (drv.stats["audits"], drv.stats["checks"])
            log("round %d: %d requests, %d connections%s, faults: %s; findings: %s" % (
                rnd, drv.stats["requests"], drv.stats["connections"], extra, summarize(drv.nemesis.count),
                summarize(kinds)))
            shown = {}
            for k, msg in v:
                shown[k] = shown.get(k, 0) + 1
                if shown[k] <= 5:
                    log("  %s [%s] %s" % ("OPEN" if k in a.open else "FAIL", k, msg))
            found += v
    finally:
        if redis.proc:
            redis.proc.kill()
    known = [(k, m) for k, m in found if k in a.open]
    found = [(k, m) for k, m in found if k not in a.open]
    if known:
        log("%d finding(s) of kinds still open (CHAOS_OPEN=%s): reported, not failing" % (len(known), ",".join(a.open)))
    if found:
        log("FAILED: %d finding(s); seed %d; replay: CHAOS_SEED=%d CHAOS_SECONDS=%d make check-chaos; logs in %s" % (
            len(found), a.seed, a.seed, a.seconds, out))
        return 1
    log("passed (seed %d)" % a.seed)
    if not a.keep and not a.out:
        shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

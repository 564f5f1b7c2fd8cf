"""actors.py - the chaos clients. Each actor owns one connection at a time (two while it moves
its session) and, every few tens of milliseconds, does something random to it:

  worker  every verb on a few contended names: LOCK/UNLOCK (shared, several names, wait=,
          lease=, owner=, id= and retries with the same id), ACQUIRE/RELEASE, LATCH/COUNTDOWN/
          AWAIT, STATUS, INFO, PING, HELLO; tagged and untagged, alone or pipelined in bursts;
          heartbeats with a tagged PING; now and then closes, half-closes or QUITs its
          connection, reconnects and resumes its session, or moves it to a new connection
          while the old one is still open
  flaky   a worker that also goes silent past its session ttl (expiry) and drops its
          connection more often
  junk    malformed lines: unknown verbs, bad options and tags, blank lines, NUL and control
          bytes, lines at and over max-line, random bytes on a connection of their own
  thief   (when the server hands out secrets) tries to resume other actors' sessions with a
          wrong secret or none
  resumer (several daemons) holds names and resumes its session on another daemon with tagged
          LOCK/UNLOCK/QUIT pipelined behind the HELLO, closing at any point of the resume
  operator (several daemons) KILLs sessions and FORCEs names while grants race
Every request carries the replies it may get (requests.py); wire.py checks them.
"""

import os

import requests as rq

LOCKS = ["a", "b", "c", "d", "e"]
SEMS = {"s1": 2, "s2": 3}
LATCHES = ["l1", "l2"]
OWNERS = [None, None, "", "o1", "o2"]
TTLS = [1000, 1500, 2000, 3000, 5000]
MS = 1_000_000


class Actor:
    def __init__(self, drv, name, kind, rng):
        self.drv, self.name, self.kind, self.rng = drv, name, kind, rng
        self.conn = None
        self.sess = None
        self.next_t = drv.now() + rng.randint(0, 300) * MS
        self.waiting = None      # a request whose reply must come before the next step
        self.plan = []           # what to do once self.conn is set up
        self.silent_until = 0
        self.next_hb = 0
        self.seq = 0
        self.mover = None        # the connection a session is being moved away from

    # -- helpers
    def ms(self, lo, hi):
        return self.rng.randint(lo, hi)

    def later(self, lo, hi):
        self.next_t = self.drv.now() + self.ms(lo, hi) * MS

    def ctx(self):
        authed = self.conn.authed if self.drv.password is not None else True
        return rq.Ctx(self.drv.password, authed, self.drv.secrets)

    def rid(self):
        self.seq += 1
        return "%s.%d" % (self.name, self.seq)

    def tag(self, prefix="t"):
        return self.conn.next_tag(prefix) if self.rng.random() < 0.5 else None

    def ttl_ms(self):
        return (self.sess.ttl if self.sess and self.sess.ttl else self.drv.cfg["session_ttl_ms"])

    def send(self, reqs):
        conn = self.conn
        for r in reqs:
            if r.get("verb") == "AUTH" or (r.get("verb") == "HELLO" and r.get("auth_ok") is not None):
                if conn.authed is not True:
                    conn.authed = None
        conn.send(reqs)

    # -- life cycle, driven by Driver.step
    def step(self, now):
        if self.waiting is not None:
            return self.heartbeat(now)
        if self.conn is None or not self.conn.usable():
            return self.reconnect()
        if self.conn.authed is not True and self.drv.password is not None:
            return self.authenticate()
        if self.plan:
            return self.plan.pop(0)()
        if now < self.silent_until:
            return
        self.heartbeat(now)
        self.act()

    def heartbeat(self, now):
        """The tagged PING that keeps the session alive, every ttl/3 (alone while the round
        drains); never while a HELLO or AUTH is on its way, which may change the session."""
        c, w = self.conn, self.waiting
        if c is not None and c.usable() and c.authed is True and now >= self.next_hb and \
                (w is None or w.get("verb") not in ("HELLO", "AUTH")):
            self.send([rq.simple(self.rng, self.ctx(), c.next_tag("h"), "PING")])
            self.next_hb = now + self.ttl_ms() * MS // 3
        self.next_t = now + 50 * MS

    def reconnect(self):
        old = self.sess
        conn = self.drv.connect(self)
        if conn is None:
            return self.later(100, 300)
        self.conn, self.sess = conn, conn.sess
        self.plan = []
        resume = old is not None and old.id and not old.dead and self.rng.random() < 0.7
        if resume:
            self.plan.append(lambda: self.resume(old))
        else:
            self.plan.append(self.hello)
        self.later(0, 20)

    def authenticate(self):
        r = self.rng.random()
        pw = self.drv.password
        if r < 0.08:
            self.waiting = rq.auth(self.rng, self.ctx(), None, "wrong-" + pw)
        elif r < 0.2:
            self.waiting = rq.hello(self.rng, self.ctx(), None, ttl=self.rng.choice(TTLS), name=self.name, password=pw)
        else:
            self.waiting = rq.auth(self.rng, self.ctx(), self.tag("a"), pw)
        self.send([self.waiting])

    def hello(self):
        self.waiting = rq.hello(self.rng, self.ctx(), self.tag("o"), ttl=self.rng.choice(TTLS), name=self.name)
        self.send([self.waiting])

    def resume(self, s):
        secret = s.secret if self.drv.secrets else None
        alive = False if s.dead else None
        self.waiting = rq.hello(self.rng, self.ctx(), self.tag("r"), session=s.id, secret=secret, alive=alive,
                                ttl=self.rng.choice([None, None] + TTLS))
        self.waiting["target"] = s
        self.send([self.waiting])

    def move(self):
        """Resumes this session from a new connection while the old one is still open."""
        if self.sess.id is None or not self.conn.idle():
            return
        self.mover = self.conn
        self.mover.doomed = "moving"
        s = self.sess
        conn = self.drv.connect(self)
        if conn is None:
            self.mover.doomed = None
            self.mover = None
            return
        self.conn, self.sess = conn, conn.sess
        self.plan = [lambda: self.resume(s)]

    # -- callbacks from wire.Conn
    def on_reply(self, conn, req, r, t):
        if req is self.waiting:
            self.waiting = None
        v = req.get("verb")
        if v == "AUTH" or (v == "HELLO" and req.get("auth_ok") is not None):
            conn.authed = True if r.kind == "OK" else (conn.authed if conn.authed else False)
        if v == "HELLO" and r.kind == "OK":
            self.drv.hello_ok(conn, req, r, t)
        elif v == "HELLO" and req.get("target") is not None and r.kind in ("NOSESSION", "BACKEND"):
            if r.kind == "NOSESSION":
                req["target"].dead = True
            if self.mover is not None:
                self.mover.close("move refused")
                self.mover = None
            self.plan.insert(0, self.hello)
        elif v == "QUIT" and r.kind == "OK":
            conn.sess.dead = True
        if r.kind == "OK" and v in ("LOCK", "ACQUIRE"):
            for n in req["names"]:
                conn.sess.held[(n, req["mode"], req["owner"])] = req
        elif r.kind == "OK" and v == "UNLOCK":
            counts = [int(x) for x in (r.fields.get("count") or r.fields.get("counts", "")).split(",") if x]
            for n, c in zip(req["names"], counts):
                if c == 0:
                    for m in ("x", "s"):
                        conn.sess.held.pop((n, m, req["owner"]), None)
        elif r.kind in ("OK", "NOTHELD") and v == "RELEASE":
            if r.kind == "NOTHELD" or r.fields.get("held") == "0":
                conn.sess.held.pop((req["names"][0], "p", req["owner"]), None)

    def on_event(self, conn, ev, t):
        if ev[0] == "LOST":
            for k in [k for k in conn.sess.held if k[0] == ev[1]]:
                conn.sess.held.pop(k, None)

    def on_close(self, conn, t):
        if conn is self.conn and self.waiting is not None:
            self.waiting = None
        if conn is self.mover:
            self.mover = None
        if conn is self.conn:
            if self.mover is not None:
                self.mover.close("move abandoned")
            self.later(20, 400)

    # -- what a worker does
    def act(self):
        rng = self.rng
        r = rng.random()
        flaky = self.kind == "flaky"
        if r < (0.02 if flaky else 0.006):
            return self.drop()
        if r < (0.035 if flaky else 0.012) and self.conn.idle():
            return self.move()
        if r < (0.045 if flaky else 0.016):
            self.send([rq.simple(rng, self.ctx(), self.tag("q"), "QUIT")])
            self.conn.doomed = "quit"
            return self.later(50, 300)
        if flaky and r < 0.06:
            self.silent_until = self.drv.now() + int(self.ttl_ms() * rng.uniform(1.2, 2.0)) * MS
            return
        if self.kind == "thief" and self.drv.secrets and r < 0.12 and self.conn.idle():
            return self.steal()
        n = 1 if rng.random() < 0.7 else rng.randint(2, 10)
        reqs = [self.one() for _ in range(n)]
        self.send([x for x in reqs if x is not None])
        self.later(10, 250 if n == 1 else 500)

    def drop(self):
        """Closes or half-closes the connection at a random point, maybe mid-line."""
        rng = self.rng
        r = rng.random()
        if r < 0.35:
            reqs = [self.one() for _ in range(rng.randint(0, 4))]
            self.send([x for x in reqs if x is not None])
            self.conn.shut()
        elif r < 0.5:
            self.conn.write(b"LOCK a wa")
            self.conn.close("mid-line")
        else:
            self.conn.close("dropped")
        self.later(20, 500)

    def steal(self):
        victims = [s for s in self.drv.sessions if s.id and not s.dead and s is not self.sess]
        if not victims:
            return
        v = self.rng.choice(victims)
        secret = None if self.rng.random() < 0.3 else os.urandom(16).hex()
        self.waiting = rq.hello(self.rng, self.ctx(), self.tag("x"), session=v.id, secret=secret, alive=False)
        self.send([self.waiting])
        self.later(10, 200)

    def one(self):
        """One random request for a burst."""
        rng, ctx = self.rng, self.ctx()
        r = rng.random()
        tag = self.tag()
        owner = rng.choice(OWNERS)
        rid = self.rid() if rng.random() < 0.2 else None
        if r < 0.33:
            names = rng.sample(LOCKS, 1 if rng.random() < 0.8 else rng.randint(2, 3))
            wait = rng.choice([0, None, None, 0, rng.randint(20, 1500), rng.randint(20, 3000)])
            if tag and rng.random() < 0.04:
                wait = "inf"
            lease = rng.randint(200, 2500) if rng.random() < 0.2 else None
            req = rq.lock(rng, ctx, tag, names, shared=rng.random() < 0.3, wait=wait, lease=lease, owner=owner,
                          rid=rid)
            if rid:
                self.sess.ids.append(req)
            return req
        if r < 0.58:
            held = [k for k in self.sess.held if k[1] != "p"]
            if held and rng.random() < 0.75:
                n, m, o = rng.choice(held)
                return rq.unlock(rng, ctx, tag, [n], shared=m == "s" and rng.random() < 0.7,
                                 all_=rng.random() < 0.3, owner=o if o or rng.random() < 0.5 else None, rid=rid)
            names = rng.sample(LOCKS, 1 if rng.random() < 0.8 else 2)
            return rq.unlock(rng, ctx, tag, names, shared=rng.random() < 0.3, all_=rng.random() < 0.3, owner=owner,
                             rid=rid)
        if r < 0.66:
            name = rng.choice(list(SEMS))
            limit = SEMS[name] if rng.random() < 0.95 else SEMS[name] + 1
            wait = rng.choice([0, None, rng.randint(20, 1500)])
            req = rq.acquire(rng, ctx, tag, name, limit, permits=rng.randint(1, 2), wait=wait, owner=owner,
                             lease=rng.randint(200, 2500) if rng.random() < 0.15 else None, rid=rid)
            if rid:
                self.sess.ids.append(req)
            return req
        if r < 0.72:
            held = [k for k in self.sess.held if k[1] == "p"]
            if held and rng.random() < 0.8:
                n, _, o = rng.choice(held)
                return rq.release(rng, ctx, tag, n, permits=rng.randint(1, 2), owner=o if o else None, rid=rid)
            return rq.release(rng, ctx, tag, rng.choice(list(SEMS)), owner=owner, rid=rid)
        if r < 0.78:
            name = rng.choice(LATCHES)
            k = rng.random()
            if k < 0.3:
                return rq.latch(rng, ctx, tag, name, rng.randint(0, 4), ttl=rng.choice([None, 5000, 20000]))
            if k < 0.65:
                return rq.countdown(rng, ctx, tag, name, rng.choice([None, 1, 2]))
            wait = rng.choice([0, None, rng.randint(20, 2000)])
            if tag and rng.random() < 0.1:
                wait = "inf"
            return rq.await_(rng, ctx, tag, name, wait)
        if r < 0.84:
            return rq.simple(rng, ctx, tag, "STATUS", [rng.choice(LOCKS + list(SEMS) + LATCHES)])
        if r < 0.86:
            return rq.simple(rng, ctx, tag, "INFO")
        if r < 0.92:
            return rq.simple(rng, ctx, tag, "PING")
        if r < 0.94:
            return rq.hello(rng, ctx, tag, ttl=rng.choice(TTLS), name=rng.choice([None, self.name]))
        if r < 0.97 and self.sess.ids:
            old = rng.choice(self.sess.ids)
            return self.retry(old, tag)
        if r < 0.985:  # a lock name used as another type, or the reverse
            if rng.random() < 0.5:
                return rq.acquire(rng, ctx, tag, rng.choice(LOCKS), 2)
            return rq.lock(rng, ctx, tag, [rng.choice(list(SEMS) + LATCHES)])
        return rq.simple(rng, ctx, tag, "PING")

    def retry(self, old, tag):
        """The same LOCK or ACQUIRE with the same id (a safe retry): the same options, since
        the reply of the first may be replayed (an untagged wait=inf is never sent)."""
        rng, ctx = self.rng, self.ctx()
        if old["wait"] == "inf" and tag is None:
            tag = self.conn.next_tag()
        if old["verb"] == "LOCK":
            return rq.lock(rng, ctx, tag, old["names"], old["mode"] == "s", old["wait"], old["lease"],
                           old["owner"] or None, old["id"])
        return rq.acquire(rng, ctx, tag, old["names"][0], old["limit"], old["permits"], old["wait"], old["lease"],
                          old["owner"] or None, old["id"])


class Junk(Actor):
    """Malformed lines, checked as strictly as valid ones; random bytes on their own connections."""

    def act(self):
        rng = self.rng
        r = rng.random()
        c = self.conn
        quiet = not c.fifo and not c.badtag
        if r < 0.25 and quiet:
            return self.probe()
        if r < 0.3:
            return self.wild()
        if r < 0.33 and quiet:
            return self.overlong()
        if r < 0.36 and c.authed is not False:
            self.send([rq.simple(rng, self.ctx(), self.tag("q"), "QUIT")])
            c.doomed = "quit"
            return self.later(50, 300)
        n = rng.randint(1, 8)
        self.send([self.malformed() for _ in range(n)])
        self.later(20, 300)

    def noauth(self, codes):
        ctx = self.ctx()
        return set(codes) | ({"NOAUTH"} if ctx.authed is not True else set())

    def malformed(self):
        rng = self.rng
        t = self.conn.next_tag("m")
        choices = [
            (b"FROB j1", "UNKNOWN"), (b"LOCKX j1", "UNKNOWN"), (b"LOCK", "SYNTAX"), (b"LOCK j1 frob=1", "SYNTAX"),
            (b"LOCK j1 wait=abc", "SYNTAX"), (b"LOCK j1 wait=-1", "SYNTAX"), (b"LOCK j1 lease=inf", "SYNTAX"),
            (b"LOCK j1 lease=0", "SYNTAX"), (b"LOCK j1 wait=2147483648", "SYNTAX"), (b"LOCK j1 wait=1d", "SYNTAX"),
            (b"LOCK j1 shared j2", "SYNTAX"), (b"LOCK j1 j1", "SYNTAX"), (b"LOCK a=b", "SYNTAX"),
            (b"LOCK j1 SHARED=1", "SYNTAX"), (b"LOCK j1 wait=1 wait=2", "SYNTAX"), (b"LOCK j1 shared shared", "SYNTAX"),
            (b"ACQUIRE j3", "SYNTAX"), (b"ACQUIRE j3 limit=0", "SYNTAX"), (b"ACQUIRE j3 limit=2 permits=3", "SYNTAX"),
            (b"ACQUIRE j3 limit=2 permits=0", "SYNTAX"), (b"RELEASE j3 permits=x", "SYNTAX"), (b"LATCH j4", "SYNTAX"),
            (b"LATCH j4 count=-1", "SYNTAX"), (b"COUNTDOWN j4 n=0", "SYNTAX"), (b"AWAIT j4 wait=1 x", "SYNTAX"),
            (b"STATUS", "SYNTAX"), (b"STATUS j1 j2", "SYNTAX"), (b"INFO j1", "SYNTAX"), (b"PING x", "SYNTAX"),
            (b"QUIT now", "SYNTAX"), (b"AUTH", "SYNTAX"), (b"HELLO ttl=0", "SYNTAX"), (b"HELLO ttl=inf", "SYNTAX"),
            (b"HELLO session=", "SYNTAX"), (b"HELLO name=", "SYNTAX"), (b"HELLO x", "SYNTAX"),
            (b"UNLOCK j1 owner=a b", "SYNTAX"), (b"LOCK " + b"n" * 201, "SYNTAX"),
            (b"LOCK " + b" ".join(b"k%d" % i for i in range(65)), "SYNTAX"), (b"LOCK j1 owner=" + b"o" * 201, "SYNTAX"),
            (b"LOCK j\x7f1", "SYNTAX"), (b"LOCK j1 \x01", "SYNTAX"),
        ]
        line, code = rng.choice(choices)
        k = rng.random()
        if k < 0.2:
            return rq.raw(b"#" + t.encode(), "tagged", t, self.noauth(["SYNTAX"]))
        if k < 0.27:
            return rq.raw(rng.choice([b"", b"   ", b"\t", b"\r", b" \t \r"]), "none", None, set())
        if k < 0.6:
            return rq.raw(b"#" + t.encode() + b" " + line, "tagged", t, self.noauth([code]))
        return rq.raw(line, "untagged", None, self.noauth([code]))

    def probe(self):
        """A line with a bad tag, a NUL or another control byte, alone on the connection (whether
        a bad tag is answered in turn or at once is not fixed): ERR SYNTAX."""
        rng = self.rng
        if rng.random() < 0.3:
            bad = rng.choice([b"#", b"#a!b", b"#" + b"x" * 33, b"#a\xffb", b"##x"])
            self.waiting = rq.raw(bad + b" PING", "badtag", None, self.noauth(["SYNTAX"]))
            self.send([self.waiting])
            return self.later(10, 200)
        nul = [b"PING\x00x", b"\x00PING", b"LOCK j1\x00 shared", b"PING \x00", b"STATUS j1\x00j2",
               b"HELLO ttl=1s\x00"]
        ctl = [(b"PI\x01NG", ["SYNTAX", "UNKNOWN"]), (b"PING\x0bx", ["SYNTAX", "UNKNOWN"]),
               (b"LOCK j\x1b1", ["SYNTAX"]), (b"STATUS j1\x0cj2", ["SYNTAX"]), (b"\x04", ["SYNTAX", "UNKNOWN"]),
               (b"PI\rNG", ["SYNTAX", "UNKNOWN"])]
        if rng.random() < 0.5:
            line, codes = rng.choice(nul), ["SYNTAX"]
        else:
            line, codes = rng.choice(ctl)
        self.waiting = rq.raw(line, "untagged", None, self.noauth(codes))
        self.send([self.waiting])
        self.later(10, 200)

    def overlong(self):
        """A line over max-line (then the server closes), or one exactly at it (a valid PING)."""
        rng, c = self.rng, self.conn
        limit = self.drv.cfg["max_line"]
        if c.authed is not True and self.drv.password is not None:
            limit = self.drv.cfg["preauth_max_line"]
        if rng.random() < 0.4 and (c.authed is True or self.drv.password is None):
            line = b"PING" + b" " * (limit - 5)  # limit bytes with the newline
            return self.send([rq.raw(line, "untagged", None, {"OK"})])
        n = limit + rng.choice([0, 1, 100, 70000])
        line = b"LOCK j1 " + b"x" * (n - 8)
        req = rq.raw(line, "toobig", None, {"TOOBIG"})
        c.doomed = "toobig"
        self.send([req])
        self.later(20, 200)

    def wild(self):
        """Random bytes and valid lines on names of their own (w*), then a close or half-close."""
        rng = self.rng
        conn = self.drv.connect(self, wild=True)
        if conn is None:
            return
        parts = []
        for _ in range(rng.randint(1, 30)):
            k = rng.random()
            if k < 0.4:
                parts.append(bytes(rng.randint(0, 255) for _ in range(rng.randint(1, 40))))
            elif k < 0.8:
                parts.append(rng.choice([b"LOCK w1 wait=100\n", b"#a LOCK w1 w2 shared\n", b"UNLOCK w1\n",
                                         b"#b AWAIT w3 wait=50\n", b"LATCH w3 count=2\n", b"COUNTDOWN w3\n",
                                         b"ACQUIRE w4 limit=1\n", b"RELEASE w4\n", b"QUIT\n", b"#c QUIT\n",
                                         b"HELLO ttl=1s\n", b"AUTH x\n", b"STATUS w1\n", b"INFO\n",
                                         b"#d LOCK w1 wait=inf\n", b"\n", b"\r\n"]))
            else:
                parts.append(b"PING\n")
        conn.write(b"".join(parts))
        self.drv.after(rng.randint(0, 800), lambda: conn.shut() if rng.random() < 0.5 else conn.close("wild"))
        self.drv.after(rng.randint(900, 2500), lambda: conn.close("wild"))


class Thief(Actor):
    pass


KINDS = {"worker": Actor, "flaky": Actor, "junk": Junk, "thief": Thief}


RNAMES = ["r1", "r2", "r3"]   # the names resumers take and wait for (workers never touch them)


class Resumer(Actor):
    """Holds names on one daemon and resumes its session on another, with tagged LOCK, UNLOCK
    and QUIT pipelined behind the HELLO, closing the connection at random points of the resume.
    It keeps a ledger of what it was told it holds, to check that every hold it loses is
    reported (* LOST) and that what it was told it released is gone (chaos.py's audits)."""

    def __init__(self, drv, name, kind, rng):
        Actor.__init__(self, drv, name, kind, rng)
        self.home = None         # the wire.Sess it holds names in
        self.ledger = {}         # name -> token it was told it holds
        self.released = {}       # name -> (time, session id) it was told it released
        self.lock_sent = {}      # name -> when it last asked for it
        self.lost_seen = set()   # (name, token) of every * LOST read
        self.suspects = []       # (session id, name, token, time, why): ERR NOTHELD for a ledger hold
        self.close_on = None     # when to drop the resuming connection: "ok" | "pipe"
        self.last_daemon = None  # the daemon the session was on before the resume in flight
        self.backend_at = None   # an ERR BACKEND to a resume: the session should still be where it was

    def daemon_of(self, conn):
        return conn.dmn.idx if conn is not None and conn.dmn is not None else 0

    def reconnect(self):
        s = self.home
        if s is None or s.dead or not s.id:
            self.home, self.ledger = None, {}
            return Actor.reconnect(self)
        # Back after a drop: resume again, on the daemon it was on before half of the time.
        d = self.last_daemon if self.last_daemon is not None and self.rng.random() < 0.5 else None
        conn = self.drv.connect(self, daemon=d)
        if conn is None:
            return self.later(100, 300)
        self.conn, self.sess = conn, conn.sess
        self.plan = [lambda: self.resume_piped(s)]
        self.later(0, 20)

    def act(self):
        rng = self.rng
        c = self.conn
        if self.home is None or self.home is not self.sess:
            self.home, self.ledger = self.sess, {}
        r = rng.random()
        if self.ledger and r < 0.4 and len(self.drv.daemons) > 1 and not c.fifo and self.sess.id and \
                (self.sess.secret or not self.drv.secrets):
            return self.jump()
        if len(self.ledger) < 2 and r < 0.75:
            name = rng.choice(RNAMES)
            self.lock_sent[name] = self.drv.now()
            wait = rng.choice([0, rng.randint(500, 4000), rng.randint(2000, 6000)])
            self.send([rq.lock(rng, self.ctx(), c.next_tag("l"), [name], wait=wait)])
            return self.later(50, 600)
        if self.ledger and r < 0.9:
            name = rng.choice(sorted(self.ledger))
            self.send([rq.unlock(rng, self.ctx(), self.tag("u"), [name])])
            return self.later(50, 400)
        if r < 0.93:
            self.send([rq.simple(rng, self.ctx(), self.tag("q"), "QUIT")])
            c.doomed = "quit"
            return self.later(50, 300)
        self.later(50, 300)

    def jump(self):
        """The session goes to another daemon: the old connection is closed first, or kept open
        (then it must get * BYE reason=moved)."""
        old, s = self.conn, self.sess
        self.last_daemon = self.daemon_of(old)
        others = [k for k in range(len(self.drv.daemons)) if k != self.last_daemon]
        if self.rng.random() < 0.3 and old.idle():
            self.mover = old
            old.doomed = "moving"
        else:
            old.close("jump")
        conn = self.drv.connect(self, daemon=self.rng.choice(others))
        if conn is None:
            return self.later(50, 200)
        self.conn, self.sess = conn, conn.sess
        self.plan = [lambda: self.resume_piped(s)]
        self.later(0, 10)

    def resume_piped(self, s):
        """HELLO session= with 0-3 tagged requests in the same write, then maybe a close."""
        rng, ctx = self.rng, self.ctx()
        secret = s.secret if self.drv.secrets else None
        hello = rq.hello(rng, ctx, self.tag("r"), session=s.id, secret=secret, alive=False if s.dead else None)
        hello["target"] = s
        reqs = [hello]
        held = sorted(self.ledger)
        for _ in range(rng.choice([0, 1, 1, 2, 3])):
            k = rng.random()
            if held and k < 0.55:   # the name it holds, asked again: a reentry once the resume is done
                name = rng.choice(held)
                reqs.append(rq.lock(rng, ctx, self.conn.next_tag("pl"), [name], wait=rng.choice([0, 0, 300, 1500])))
            elif held and k < 0.7:
                reqs.append(rq.unlock(rng, ctx, self.conn.next_tag("pu"), [rng.choice(held)]))
            elif k < 0.9:
                name = rng.choice(RNAMES)
                self.lock_sent[name] = self.drv.now()
                reqs.append(rq.lock(rng, ctx, self.conn.next_tag("pl"), [name], wait=rng.randint(0, 2000)))
            else:
                reqs.append(rq.simple(rng, ctx, self.conn.next_tag("pq"), "QUIT"))
        self.waiting = self.cur_hello = hello
        conn = self.conn
        # The rest in the same write, or a moment later: while the resume reads the record or
        # adopts the holds (a Redis round trip or two).
        gap = rng.choice([None, None, 0.2, 0.5, 1, 1.5, 2.5, 4])
        if gap is None or len(reqs) == 1:
            self.send(reqs)
        else:
            self.send(reqs[:1])
            self.drv.after(gap, lambda: conn.usable() and conn.send(reqs[1:]))
        if any(r["verb"] == "QUIT" for r in reqs):
            conn.doomed = "quit"
        k = rng.random()
        self.close_on = None
        if k < 0.12:
            conn.close("before the HELLO's answer")
        elif k < 0.25:
            self.drv.after(rng.randint(0, 40), lambda: conn.close("during the resume"))
        elif k < 0.35:
            self.close_on = "ok"
        elif k < 0.45 and len(reqs) > 1:
            self.close_on = "pipe"

    # -- replies and events
    def on_reply(self, conn, req, r, t):
        v = req.get("verb")
        if v == "HELLO" and req.get("target") is not None:
            return self.on_resume(conn, req, r, t)
        Actor.on_reply(self, conn, req, r, t)
        amb = req.get("amb") is not None
        sid = self.home.id if self.home is not None else None
        if v == "LOCK" and r.kind == "OK" and not amb and conn.sess is self.home:
            name = req["names"][0]
            tok = int(r.fields["token"])
            if self.ledger.get(name) not in (None, tok) and (name, self.ledger[name]) not in self.lost_seen:
                self.suspect(sid, name, self.ledger[name], t, "a new token %d granted" % tok)
            self.ledger[name] = tok
            self.released.pop(name, None)
        elif v == "LOCK" and r.kind == "OK" and amb and conn.sess is self.home:
            # sent behind the resume that succeeded: the name is held again, whatever was released before
            self.released.pop(req["names"][0], None)
        elif v == "UNLOCK" and (conn.sess is self.home or amb):
            name = req["names"][0]
            if r.kind == "OK" and r.fields.get("count") == "0" and name in self.ledger:
                self.ledger.pop(name)
                self.released[name] = (t, sid)
            elif r.kind == "NOTHELD" and not amb and name in self.ledger:
                self.suspect(sid, name, self.ledger.pop(name), t, "ERR NOTHELD to %r" % req["line"].decode())
        elif v == "QUIT" and r.kind == "OK" and (conn.sess is self.home or amb):
            if amb and self.home is not None:
                self.drv.quit_check(self, self.home.id, self.cur_hello, req, t)
                self.home.dead = True
            self.ledger = {}
        if self.close_on == "pipe" and conn is self.conn and amb:
            self.close_on = None
            conn.close("mid-pipeline")

    def on_resume(self, conn, req, r, t):
        s = req["target"]
        req["answer"] = r.kind
        if r.kind == "OK":
            self.drv.hello_ok(conn, req, r, t)
            if conn.actor.conn is conn:
                self.sess = s
            self.backend_at = None
            if self.close_on == "ok" and conn is self.conn:
                self.close_on = None
                conn.close("right after the HELLO's answer")
            return
        if self.mover is not None:
            # the old connection still has the session: back to it
            m, self.mover = self.mover, None
            if m.state == "open" and m.sess is s:
                m.doomed = None
                self.conn.close("resume refused")
                self.conn, self.sess = m, s
        if r.kind == "NOSESSION":
            s.dead = True
            self.ledger = {}
            if conn is self.conn:
                self.plan.insert(0, self.hello)
        elif r.kind == "BACKEND":
            # "nothing changed; the session stays where it was": resumed again, it must have its holds
            self.backend_at = (t, self.daemon_of(conn))
            if conn is self.conn:
                self.plan.insert(0, lambda: self.resume_piped(s))

    def on_close(self, conn, t):
        # An UNLOCK (or QUIT) whose answer it never read may have run: its holds are not known
        # any more, and a new token for them later is no hold lost untold.
        for r in conn.pending():
            if r.get("verb") == "QUIT":
                self.ledger = {}
            elif r.get("verb") == "UNLOCK":
                for name in r.get("names") or []:
                    self.ledger.pop(name, None)
        Actor.on_close(self, conn, t)

    def on_event(self, conn, ev, t):
        Actor.on_event(self, conn, ev, t)
        if ev[0] == "LOST":
            self.lost_seen.add((ev[1], ev[2]))
            if self.ledger.get(ev[1]) == ev[2]:
                self.ledger.pop(ev[1])
        elif ev[0] == "BYE" and ev[1] == "expired" and self.home is not None and conn.sess is self.home:
            self.ledger = {}

    def suspect(self, sid, name, token, t, why):
        if self.backend_at is not None:
            why += " (after ERR BACKEND to a resume on daemon %d at %.3f s)" % (
                self.backend_at[1], (self.backend_at[0] - self.drv.t0) / 1e9)
        self.suspects.append((sid, name, token, t, why))

    def untold(self):
        """The holds it lost without ever reading their * LOST: (message)s."""
        return ["session %s, %s token=%d: %s at %.3f s, and no * LOST for it" % (
            sid, name, tok, why, (t - self.drv.t0) / 1e9)
            for sid, name, tok, t, why in self.suspects if (name, tok) not in self.lost_seen]


class Operator(Actor):
    """The operator: AUTH with the adminpass, then KILL of sessions (most of all those that hold
    or wait, or are being resumed) and FORCE of contended names while grants race, now and
    then SESSIONS and LIST. After a KILL answered OK no hold of the session may stay in Redis."""

    def reconnect(self):
        conn = self.drv.connect(self)
        if conn is None:
            return self.later(100, 300)
        self.conn, self.sess = conn, conn.sess
        conn.admin = False
        self.plan = [] if self.drv.password else [self.admin_auth]
        self.later(0, 20)

    def authenticate(self):
        self.admin_auth()

    def admin_auth(self):
        self.waiting = rq.make(self.rng, rq.Ctx(None, True, None), "AUTH", self.tag("a"), [self.drv.adminpass],
                               None, [], {"OK"}, auth_ok=True)
        self.waiting["names"] = []
        self.send([self.waiting])

    def on_reply(self, conn, req, r, t):
        if req.get("verb") == "AUTH":
            if req is self.waiting:
                self.waiting = None
            conn.authed = True
            conn.admin = r.kind == "OK"
            return
        if req.get("verb") == "KILL" and r.kind == "OK":
            self.drv.kill_check(req["victim"], req, t)

    def on_event(self, conn, ev, t):
        pass

    def victim(self):
        own = [x.conn for x in self.drv.actors if isinstance(x, Operator)]
        live = [s for s in self.drv.sessions if s.id and not s.dead and s.conn not in own]
        resuming = [c.resuming for c in self.drv.conns.values() if c.resuming is not None and not c.resuming.dead]
        holding = [s for s in live if s.held]
        r = self.rng.random()
        if resuming and r < 0.4:
            return self.rng.choice(resuming)
        if holding and r < 0.85:
            return self.rng.choice(holding)
        return self.rng.choice(live) if live else None

    def act(self):
        rng, c = self.rng, self.conn
        ctx = rq.Ctx(None, True, self.drv.secrets)
        if not getattr(c, "admin", False):
            return self.later(200, 500)
        r = rng.random()
        if r < 0.4:
            v = self.victim()
            if v is not None:
                req = rq.make(rng, ctx, "KILL", self.tag("k"), [v.id], None, [], {"OK", "NOSESSION", "BACKEND"},
                              victim=v)
                req["names"] = []
                self.send([req])
        elif r < 0.8:
            name = rng.choice(RNAMES + LOCKS + list(SEMS))
            self.send([rq.make(rng, ctx, "FORCE", self.tag("f"), [name], None, [], {"OK", "BACKEND"})])
        elif r < 0.9:
            self.send([rq.make(rng, ctx, "SESSIONS", self.tag("s"), [], [("limit", "1000")], [], {"OK"})])
        else:
            self.send([rq.make(rng, ctx, "LIST", self.tag("i"), [], None, [], {"OK", "BACKEND"})])
        self.later(300, 1500)


KINDS.update(resumer=Resumer, operator=Operator)

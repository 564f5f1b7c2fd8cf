"""The session logic of a client without I/O, shared by the threaded and the asyncio client.

A driver owns the connection. It asks Core for the HELLO line, hands it every line it reads,
sends what Core queues in `out`, calls tick() when tick() said it should, and tells Core when
the connection breaks; callers submit Requests. Core keeps the rules of libdlock(3):

- every request is tagged; LOCK, UNLOCK, ACQUIRE and RELEASE carry id=<tag>, so that a request
  that was on its way when the connection broke is sent again once the session is resumed and
  the server answers it once;
- a heartbeat `#hbN PING` goes out every third of the period within which the session and
  its holds must be confirmed: the session ttl, or the time holds are trusted when shorter;
- holds are trusted for 2/3 of the server's lock-lease (HELLO's `lease=`) less a margin,
  after the send time of the last heartbeat answered while the server was not in jeopardy
  (or of the HELLO that resumed the session); when that runs out, or the ttl since the last
  answered heartbeat, the session is given up: its holds are reported lost before anyone
  else could be granted them, and the next HELLO starts a new session.
"""

import itertools
import math
import os
import threading
import time

from ._proto import MAX_LINE, Busy, Error, Lost, Reply, Timeout, check_word, ms, parse_addrs

ID_VERBS = ("LOCK", "UNLOCK", "ACQUIRE", "RELEASE")  # the verbs whose repeats dlockd knows by id=
HB_RING = 16  # heartbeats remembered for their send time


def now():
    return time.monotonic()


def trust_of(lease):
    """Seconds holds outlive a confirmation on a server whose lock-lease is `lease` seconds
    (0: not told). dlockd renews every lease each third of it, so whenever it answers a hold
    has 2/3 of it left; the margin is a tenth of the lease, 0.5 s at least, half at most."""
    left = lease * 2 / 3
    return left - min(max(lease / 10, 0.5), left / 2)


class Request:
    """One request, from the call that makes it to its reply."""

    def __init__(self, verb, args, names=(), owner="", mode=None, wait=None, permits=0, hold=None):
        self.verb = verb          # LOCK, UNLOCK, ...
        self.body = " ".join([verb] + list(args))  # the line without tag, id= and wait=
        self.names = list(names)
        self.owner = owner
        self.mode = mode          # "x" exclusive, "s" shared, "p" permits
        self.wait = wait          # seconds; None: no wait= sent; math.inf: wait=inf
        self.permits = permits
        self.hold = hold          # UNLOCK/RELEASE: the Hold it ends
        self.tag = None
        self.started = 0.0
        self.gen = 0              # connection it was sent on; 0: not sent yet
        self.dropped = False      # on its way when the connection broke
        self.abandoned = False    # the caller gave up: a late grant is given back
        self.internal = False     # the library's own (an undo): nobody waits for it
        self.done = False
        self.result = None
        self.exc = None
        self.on_done = None       # set by the driver: called (without arguments) when done


class Hold:
    """A lock on one or several names, or permits of a semaphore, as one call got them.

    names, tokens, counts: per name; token and count: those of the first name (fencing token,
    reentrancy count or permits held); shared; owner; permits and free (semaphores); lost: a
    threading.Event set when the hold is gone although it was not released, lost_reason
    (expired, jeopardy, lease, backend, admin, moved; notheld: an unlock found it gone)."""

    def __init__(self, client, kind, names, owner, mode, tokens, counts, permits=0, free=None):
        self.kind = kind          # "lock" or "semaphore"
        self.names = names
        self.owner = owner
        self.mode = mode
        self.shared = mode == "s"
        self.tokens = tokens
        self.counts = counts
        self.token = tokens[0]
        self.count = counts[0]
        self.permits = permits
        self.free = free
        self.lost = threading.Event()
        self.lost_reason = None
        self.released = False
        self._lost_names = set()
        self._client = client

    def __repr__(self):
        state = "lost" if self.lost.is_set() else "released" if self.released else "held"
        return "<dlock.Hold %s %s token=%d %s>" % (self.kind, ",".join(self.names), self.token, state)


class Core:
    """One client's session, requests and holds (see the top of this file)."""

    def __init__(self, addrs, name, ttl, password, request_timeout, hold_class, client):
        self.addrs = parse_addrs(addrs)
        self.cur = 0               # index of the address the session lives on
        self.name = name if name is None else check_word("name", name)
        self.want_ttl = ttl
        self.password = password or os.environ.get("DLOCK_PASSWORD")
        self.request_timeout = request_timeout
        self.hold_class = hold_class
        self.client = client
        self.sid = None            # session id; None before the first HELLO
        self.secret = None
        self.dead = False          # the session is gone: the next HELLO starts a new one
        self.ended = False         # QUIT answered: nothing more is sent
        self.ttl = 0.0             # granted by the server
        self.trust = 0.0           # how long holds outlive a confirmation; 0: the ttl bounds them
        self.safe_until = 0.0      # send time of the last answered heartbeat + ttl
        self.confirmed = 0.0       # send time of the last answer that confirmed the holds
        self.up = False            # connected and HELLO answered
        self.gen = 0               # connection generation
        self.drop_now = False      # the driver must close the connection
        self.hello_sent = 0.0
        self.resuming = False
        self.next_hb = 0.0
        self.hb_seq = 0
        self.hb_sent = {}
        self.jeopardy = set()      # reasons in force: connection, heartbeat, backend
        self.reqs = {}             # tag -> Request, outstanding
        self.holds = set()         # Holds not released
        self.seq = itertools.count(1)
        self.out = []              # lines to send
        self.events = []           # ("lost", hold) and ("jeopardy", on, reason) for the callbacks

    # ------------------------------------------------------------ time

    def period(self):
        """The time within which a heartbeat must be answered."""
        return self.trust if 0 < self.trust < self.ttl else self.ttl

    def session_end(self):
        """When the session may have expired, or its holds lapsed unconfirmed."""
        if self.trust > 0:
            return min(self.confirmed + self.trust, self.safe_until)
        return self.safe_until

    def live(self):
        return self.sid is not None and not self.dead

    def tick(self, t):
        """Heartbeats and the deadlines of the session; returns the seconds until the next."""
        if self.live() and t >= self.session_end():
            self.session_dead("expired" if t >= self.safe_until else "jeopardy")
            if self.up:  # make sure the server releases what we no longer trust
                self.out.append("#bye QUIT")
                self.drop_now = True
            return 0.0
        nxt = math.inf
        if self.live():
            late = self.safe_until - self.ttl + self.period() * 2 / 3
            if t >= late:
                self.set_jeopardy("heartbeat", True)
            else:
                nxt = late
            nxt = min(nxt, self.session_end())
        if self.up and not self.ended:
            if t >= self.next_hb:
                self.hb_seq += 1
                self.hb_sent[self.hb_seq] = t
                self.hb_sent.pop(self.hb_seq - HB_RING, None)
                self.out.append("#hb%d PING" % self.hb_seq)
                self.next_hb = t + max(self.period() / 3, 0.001)
            nxt = min(nxt, self.next_hb)
        return 60.0 if nxt == math.inf else max(nxt - t, 0.0)

    def attempt_deadline(self, connect_timeout):
        """The time by which one connection attempt with its HELLO must be done."""
        t = now() + connect_timeout
        return min(t, self.session_end()) if self.live() else t

    def take_out(self):
        data = "".join(line + "\n" for line in self.out)
        self.out = []
        return data.encode()

    # ------------------------------------------------------------ the session

    def set_jeopardy(self, reason, on):
        before = bool(self.jeopardy)
        if on:
            self.jeopardy.add(reason)
        else:
            self.jeopardy.discard(reason)
        if before != bool(self.jeopardy):
            self.events.append(("jeopardy", not before, reason if on else None))

    def lose(self, hold, reason, names=None):
        hold._lost_names.update(names or hold.names)
        if not hold.lost.is_set():
            hold.lost_reason = reason
            hold.lost.set()
            self.events.append(("lost", hold))

    def session_dead(self, reason):
        """The session is gone: every hold is lost, and pending releases can only fail."""
        if not self.live():
            return
        self.dead = True
        self.secret = None
        for hold in list(self.holds):
            self.lose(hold, reason)
        for r in list(self.reqs.values()):
            if r.verb in ("UNLOCK", "RELEASE") and not r.internal:
                self.finish(r, exc=Lost("the session ended (%s)" % reason))
        self.set_jeopardy("heartbeat", False)
        self.set_jeopardy("backend", False)

    def hello_line(self):
        self.resuming = bool(self.live() and self.secret)
        words = ["#hello", "HELLO"]
        if self.resuming:
            words += ["session=" + self.sid, "secret=" + self.secret]
        if self.want_ttl:
            words.append("ttl=" + ms(self.want_ttl))
        if self.name:
            words.append("name=" + self.name)
        if self.password:
            words.append("auth=" + self.password)
        self.hello_sent = now()
        return " ".join(words)

    def on_hello(self, line, idx):
        """The reply to HELLO. Returns None once the connection is in use, or a HELLO to send
        next (a new session after the old one could not be resumed); raises Error."""
        rp = Reply(line)
        if rp.status == "ERR" and rp.code == "NOSESSION" and self.resuming:
            self.session_dead("expired")
            return self.hello_line()
        err = rp.error()
        if err is not None:
            raise err
        sid, ttl = rp.fields.get("session"), rp.int("ttl") / 1000
        if not sid or ttl <= 0:
            raise Error("PROTO", "bad HELLO reply %r" % line)
        lease = rp.int("lease") / 1000 if "lease" in rp.fields else 0
        resumed = self.resuming and rp.fields.get("resumed") == "1" and sid == self.sid
        if self.resuming and not resumed:
            self.session_dead("expired")  # a server that started a new session instead
        self.install(idx, sid, rp.fields.get("secret"), ttl, lease, resumed)
        return None

    def install(self, idx, sid, secret, ttl, lease, resumed):
        """The connection is up: record the session, and send what waits."""
        self.up, self.drop_now = True, False
        self.gen += 1
        self.cur = idx
        self.sid, self.dead = sid, False
        if secret or not resumed:
            self.secret = secret
        self.ttl, self.trust = ttl, trust_of(lease) if lease else 0.0
        self.safe_until = self.hello_sent + ttl
        if not resumed or "backend" not in self.jeopardy:
            self.confirmed = self.hello_sent  # it still had the session, and renewed its holds
        self.next_hb = now() + self.period() / 3
        for reason in ("connection", "heartbeat") + (() if resumed else ("backend",)):
            self.set_jeopardy(reason, False)
        for r in list(self.reqs.values()):
            if r.gen == 0:
                self.resend(r, resumed)

    def on_drop(self):
        """The connection broke (or was given up)."""
        self.up = False
        self.out = []
        for r in list(self.reqs.values()):
            if r.gen == 0:
                continue
            r.gen = 0
            if r.verb == "QUIT":
                self.finish(r, self.on_quit(r, None))  # the server closes the connection after QUIT
            elif r.verb == "COUNTDOWN" or (r.verb not in ID_VERBS and (r.internal or r.abandoned)):
                self.finish(r, exc=Error("CONN", "connection lost; it may or may not have been done"))
            else:
                r.dropped = True
        if self.live() and not self.ended:
            self.set_jeopardy("connection", True)

    # ------------------------------------------------------------ requests

    def submit(self, r):
        r.tag = "c%d" % next(self.seq)
        r.started = now()
        self.reqs[r.tag] = r
        if self.up:
            self.send(r)

    def send(self, r):
        words = ["#" + r.tag, r.body]
        if r.verb in ID_VERBS:
            words.append("id=" + r.tag)
        if r.wait is not None:
            left = r.wait - (now() - r.started)  # what is left of it after a reconnect
            words.append("wait=" + ms(max(left, 0)))
        line = " ".join(words)
        if len(line) + 1 > MAX_LINE:
            self.finish(r, exc=Error("TOOBIG", "request longer than %d bytes" % MAX_LINE))
            return
        self.out.append(line)
        r.gen = self.gen

    def resend(self, r, resumed):
        if r.dropped and not resumed:
            # A new session: what the old one granted or released is moot.
            if r.internal or r.abandoned:
                return self.finish(r, exc=Error("CONN", "the session ended"))
            if r.verb in ("UNLOCK", "RELEASE"):
                return self.finish(r, exc=Lost("the session ended"))
        r.dropped = False
        self.send(r)

    def deadline(self, r):
        """When the caller of r gives up (None: never)."""
        if r.wait == math.inf:
            return None
        return r.started + (r.wait or 0) + self.request_timeout

    def abandon(self, r):
        """The caller gave up on r: forget it, or let a late grant be given back."""
        if r.done:
            return
        if r.gen or r.dropped:
            r.abandoned = True
        else:
            self.reqs.pop(r.tag, None)

    def fail_all(self, exc):
        """The client stops: every request still outstanding fails with exc."""
        for r in list(self.reqs.values()):
            self.finish(r, exc=exc)

    def finish(self, r, result=None, exc=None):
        self.reqs.pop(r.tag, None)
        r.done, r.gen, r.result, r.exc = True, 0, result, exc
        if r.on_done is not None:
            r.on_done()

    def on_line(self, line):
        rp = Reply(line)
        if rp.event:
            self.on_event(rp)
        elif rp.tag.startswith("hb"):
            self.on_heartbeat(rp)
        elif rp.tag in self.reqs:
            r = self.reqs[rp.tag]
            if r.internal:
                return self.finish(r)
            try:
                self.finish(r, getattr(Core, "on_" + r.verb.lower(), Core.on_other)(self, r, rp))
            except Error as e:
                self.finish(r, exc=e)

    def on_event(self, rp):
        reason = rp.fields.get("reason", "expired")
        if rp.status == "LOST" and rp.arg:
            token = rp.fields.get("token")
            for hold in list(self.holds):
                for name, tok in zip(hold.names, hold.tokens):
                    if name == rp.arg and (token is None or str(tok) == token):
                        self.lose(hold, reason, [name])
        elif rp.status == "JEOPARDY":
            self.set_jeopardy("backend", True)
        elif rp.status == "SAFE":
            self.set_jeopardy("backend", False)
            self.next_hb = now()  # its answer confirms the holds
        elif rp.status == "BYE" and reason != "shutdown":
            # expired or moved; a dlockd that shuts down keeps the session for a resume
            self.session_dead(reason)

    def on_heartbeat(self, rp):
        try:
            sent = self.hb_sent[int(rp.tag[2:])]
        except (KeyError, ValueError):
            return
        if rp.status != "OK":
            return
        self.safe_until = max(self.safe_until, sent + self.ttl)
        if "backend" not in self.jeopardy:
            self.confirmed = max(self.confirmed, sent)  # a dlockd in touch with Redis renews the holds
        self.set_jeopardy("heartbeat", False)

    # ------------------------------------------------------------ replies, per verb

    def on_lock(self, r, rp):
        err = rp.error()
        if isinstance(err, Busy) and r.wait:
            err = Timeout("sent again with no wait left")
        if err is not None:
            raise err
        n = len(r.names)
        tokens = [rp.int("token")] if n == 1 else rp.ints("tokens", n)
        counts = [rp.int("count")] if n == 1 else rp.ints("counts", n)
        if r.abandoned:  # nobody waits for this grant any more
            return self.undo(r.owner, "UNLOCK", r.names + (["shared"] if r.mode == "s" else []))
        return self.add_hold("lock", r, tokens, counts)

    def on_acquire(self, r, rp):
        err = rp.error()
        if isinstance(err, Busy) and r.wait:
            err = Timeout("sent again with no wait left")
        if err is not None:
            raise err
        token, held = rp.int("token"), rp.int("held")
        if r.abandoned:
            return self.undo(r.owner, "RELEASE", [r.names[0], "permits=%d" % r.permits])
        return self.add_hold("semaphore", r, [token], [held], rp.int("free"))

    def on_unlock(self, r, rp):
        err = rp.error()
        hold = r.hold
        if err is not None and err.code == "NOTHELD":
            # the server does not have it: it was lost without us hearing of it
            self.lose(hold, "notheld")
            err = Lost("not held by the server: " + err.text)
        if err is not None:
            raise err
        hold.released = True
        self.holds.discard(hold)
        return rp.fields

    on_release = on_unlock

    def on_latch(self, r, rp):
        err = rp.error()
        if err is not None:
            raise err
        return rp.int("count")

    on_countdown = on_latch

    def on_status(self, r, rp):
        err = rp.error()
        if err is not None:
            raise err
        return rp.parsed_json()

    on_info = on_status

    def on_quit(self, r, rp):
        self.ended = self.dead = True
        self.secret = None
        for hold in self.holds:
            hold.released = True
        self.holds.clear()

    def on_other(self, r, rp):  # PING, AWAIT
        err = rp.error()
        if err is not None:
            raise err

    def add_hold(self, kind, r, tokens, counts, free=None):
        hold = self.hold_class(self.client, kind, r.names, r.owner, r.mode, tokens, counts, r.permits, free)
        self.holds.add(hold)
        return hold

    def undo(self, owner, verb, args):
        """Gives back what a request got that nobody waits for (or only part of a lost hold)."""
        u = Request(verb, args + (["owner=" + owner] if owner else []))
        u.internal = True
        self.submit(u)

    def release_request(self, hold):
        """The request that ends hold, or None when there is nothing to send; raises Lost
        for a hold that was lost (after giving back the names of it that were not)."""
        if hold.released:
            return None
        names = [n for n in hold.names if n not in hold._lost_names]
        if hold.lost.is_set():
            hold.released = True
            self.holds.discard(hold)
            if names and self.live():  # a lock on several names lost one of them
                self.undo(hold.owner, "UNLOCK", names + (["shared"] if hold.shared else []))
            raise Lost("%s lost (%s)" % (",".join(hold.names), hold.lost_reason))
        owner = ["owner=" + hold.owner] if hold.owner else []
        if hold.kind == "semaphore":
            return Request("RELEASE", [names[0], "permits=%d" % hold.permits] + owner, names, hold.owner,
                           "p", hold=hold)
        args = names + (["shared"] if hold.shared else [])
        if not any(self.shares(hold, h) for h in self.holds):
            args.append("all")  # a repeat the server did not recognise may have re-entered it
        return Request("UNLOCK", args + owner, names, hold.owner, hold.mode, hold=hold)

    @staticmethod
    def shares(hold, other):
        """other is another hold of the same owner, in the same mode, on one of the names."""
        return other is not hold and other.owner == hold.owner and other.mode == hold.mode and \
            bool(set(other.names) & set(hold.names))


# ---------------------------------------------------------------- requests of the public API


def _seconds(wait):
    """A wait in seconds; None: without limit."""
    return math.inf if wait is None else float(wait)


def _opts(lease, owner):
    return (["lease=" + ms(lease)] if lease is not None else []) + (["owner=" + owner] if owner else [])


def lock_request(names, wait, shared, lease, owner):
    names = [names] if isinstance(names, str) else list(names)
    for n in names:
        check_word("name", n)
    check_word("owner", owner, empty=True)
    args = names + (["shared"] if shared else []) + _opts(lease, owner)
    return Request("LOCK", args, names, owner, "s" if shared else "x", wait=_seconds(wait))


def acquire_request(name, limit, permits, wait, lease, owner):
    check_word("name", name)
    check_word("owner", owner, empty=True)
    args = [name, "limit=%d" % limit, "permits=%d" % permits] + _opts(lease, owner)
    return Request("ACQUIRE", args, [name], owner, "p", wait=_seconds(wait), permits=permits)


def latch_request(name, count, ttl):
    args = [check_word("name", name), "count=%d" % count] + (["ttl=" + ms(ttl)] if ttl is not None else [])
    return Request("LATCH", args)


def countdown_request(name, n):
    return Request("COUNTDOWN", [check_word("name", name), "n=%d" % n])


def await_request(name, wait):
    return Request("AWAIT", [check_word("name", name)], wait=_seconds(wait))


def status_request(name):
    return Request("STATUS", [check_word("name", name)])

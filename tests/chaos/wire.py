"""wire.py - one client connection of the chaos run: sends request lines, pairs every line
dlockd sends with the request it answers (by tag; untagged ones in order; a bad tag's
ERR SYNTAX and ERR TOOBIG out of turn) and checks it as it arrives: the grammar, the reply
the request may get, no reply lost while the connection stays open, no close by the server
without a reason, the promises of a half-close.
"""

import collections
import errno
import socket

import grammar

MS = 1_000_000


class Sess:
    """The client's view of one session: its id and secret once HELLO told them."""

    def __init__(self, idx):
        self.idx = idx
        self.id = None
        self.secret = None
        self.ttl = None      # ms, from the last HELLO reply
        self.dead = False    # QUIT answered, BYE reason=expired read, or resume refused
        self.conn = None     # the Conn it is attached to
        self.held = {}       # (name, mode, owner) -> the request that was granted
        self.ids = []        # LOCK and ACQUIRE requests sent with id=, to retry


class Conn:
    def __init__(self, drv, cid, sock, actor, sess, wild=False):
        self.drv, self.cid, self.sock, self.actor, self.sess = drv, cid, sock, actor, sess
        self.wild = wild              # random bytes: replies are only parsed, not paired
        self.tagged = {}              # tag -> request
        self.fifo = collections.deque()  # untagged requests, in order; fifo[0] is running or next
        self.badtag = collections.deque()
        self.toobig = None
        self.buf = b""
        self.out = b""
        self.state = "open"           # open | shut (we sent FIN) | closed (by us) | eof (by the server)
        self.doomed = None            # why nothing more is sent on it
        self.explained = set()        # reasons the server may close it
        self.authed = None
        self.moved_by = None          # ns: a BYE reason=moved is due by then
        self.moved_at = None          # ns: when the reply that resumed its session elsewhere was read
        self.shut_t = None
        self.loose = None             # half-closed behind a wait: untagged replies that must still come
        self.quit_sent = False
        self.broken = False           # a violation was seen: its replies are no longer paired
        self.ntag = 0
        self.opened = drv.now()
        self.dmn = None               # the daemon process it is connected to
        self.resuming = None          # the Sess a HELLO session= in flight on it names
        self.moved_from = None        # the Sess that was resumed elsewhere while it was attached here

    # -- sending
    def next_tag(self, prefix="t"):
        self.ntag += 1
        return "%s%d" % (prefix, self.ntag)

    def idle(self):
        return not (self.tagged or self.fifo or self.badtag or self.toobig)

    def usable(self):
        return self.state == "open" and self.doomed is None

    def send(self, reqs):
        """Writes the requests in one write (a pipelined burst) and records them."""
        t = self.drv.now()
        data = b"".join(r["line"] + b"\n" for r in reqs)
        for r in reqs:
            r["c"], r["t"], r["s"] = self.cid, t, self.sess.idx
            if self.resuming is not None and r.get("target") is None:
                # Behind a resume not yet answered: dlockd may run it for this connection's own
                # session or for the one being resumed (model.py trusts neither).
                r["amb"] = self.resuming.idx
            if r.get("target") is not None:
                self.resuming = r["target"]
            self.quit_sent = self.quit_sent or r.get("verb") == "QUIT"
            r["bound"] = self.drv.bound(r)
            if r["tc"] == "tagged":
                self.tagged[r["rtag"]] = r
                r["start"] = t
            elif r["tc"] == "untagged":
                if not self.fifo:
                    r["start"] = t
                self.fifo.append(r)
            elif r["tc"] == "badtag":
                self.badtag.append(r)
                r["start"] = t
            elif r["tc"] == "toobig":
                self.toobig = r
                r["start"] = t
            self.drv.record_req(r)
        self.write(data)

    def write(self, data):
        self.out += data
        self.flush()

    def flush(self):
        while self.out and self.state in ("open",):
            try:
                n = self.sock.send(self.out)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self.out = b""
                return
            self.out = self.out[n:]

    # -- receiving
    def feed(self, data, t):
        self.buf += data
        lines = self.buf.split(b"\n")
        self.buf = lines.pop()
        for raw in lines:
            self.line(raw.decode("latin-1"), t)

    def line(self, line, t):
        drv = self.drv
        if line.startswith("*"):
            try:
                ev = grammar.parse_event(line)
            except grammar.Bad as e:
                return drv.violation("grammar", "c%d: %s: %r" % (self.cid, e, line), self)
            # A LOST read after the session moved away (sent before the old daemon heard of it)
            # belongs to the session that moved.
            owner = self.moved_from if ev[0] == "LOST" and self.moved_from is not None else self.sess
            drv.record(dict(k="ev", c=self.cid, t=t, s=owner.idx, line=line))
            drv.leak_check(self, line)
            if ev[0] == "BYE":
                self.explained.add("BYE")
                if ev[1] == "moved":
                    self.moved_by = None
                if ev[1] == "expired":
                    self.sess.dead = True
            self.actor.on_event(self, ev, t)
            return
        try:
            r = grammar.parse_reply(line)
        except grammar.Bad as e:
            return drv.violation("grammar", "c%d: %s: %r" % (self.cid, e, line), self)
        drv.leak_check(self, line, r)
        if r.kind in ("TOOBIG", "LIMIT"):
            self.explained.add(r.kind)
        if self.wild or self.broken:
            return  # after a wrong reply, the replies that follow may be paired wrongly
        if self.loose is not None and r.tag is None and not (r.kind == "SYNTAX" and self.badtag):
            # a wait cancelled by the half-close gets no reply: untagged replies cannot be paired
            self.loose -= 1
            drv.record(dict(k="loose", c=self.cid, t=t, line=line))
            if not any(r.kind in q["expect"] for q in self.fifo):
                drv.violation("reply", "c%d: %r fits none of the requests still waiting" % (self.cid, line), self)
            return
        req = self.match(r, t)
        if req is None:
            return drv.violation("unpaired", "c%d: no request waits for %r" % (self.cid, line), self)
        drv.record(dict(k="rep", c=self.cid, r=req["r"], t=t, line=line))
        if req.get("target") is not None and self.resuming is req["target"]:
            self.resuming = None
        why = grammar.check(req, r)
        if why:
            nxt = self.fifo[0] if r.tag is None and self.fifo else None
            if nxt is not None and not grammar.check(nxt, r):
                why += " (or %r got no reply: this fits the next request, %r)" % (req["line"], nxt["line"])
            drv.violation("reply", "c%d: %s: %r -> %r" % (self.cid, why, req["line"], line), self)
        if r.kind == "NOAUTH" and req.get("auth_ok") is False:
            self.explained.add("wrong password")
        self.actor.on_reply(self, req, r, t)

    def match(self, r, t):
        if r.tag is not None:
            return self.tagged.pop(r.tag, None)
        if r.kind == "TOOBIG" and self.toobig is not None:
            req, self.toobig = self.toobig, None
            return req
        if r.kind == "SYNTAX" and self.badtag:
            return self.badtag.popleft()
        if not self.fifo:
            return None
        req = self.fifo.popleft()
        if self.fifo:
            self.fifo[0]["start"] = max(self.fifo[0]["t"], t)
        return req

    def eof(self, t):
        """The server closed the connection (or reset it)."""
        if self.state in ("closed", "eof"):
            return
        was_shut = self.state == "shut"
        self.state = "eof"
        why = self.closed_why()
        self.drv.record(dict(k="eof", c=self.cid, t=t, why=why, doomed=self.doomed))
        self.drv.detach(self)
        if why is None:
            self.drv.violation("close", "c%d: closed by the server without QUIT, BYE, TOOBIG or LIMIT; %s" % (
                self.cid, self.pending_text()), self)
        elif self.moved_by is not None and why not in ("BYE", "quit") and not (why == "shut" and t == self.moved_at):
            # Half-closed and closed, read in the same turn as the resume's reply, it may have been
            # closed (all answered) before the resume: only a close read later is a violation.
            self.drv.violation("moved", "c%d: its session was resumed on another connection; closed without "
                               "* BYE reason=moved" % self.cid, self)
        elif was_shut and why == "shut":
            left = [r for r in self.pending() if not may_wait(r) and (self.loose is None or r["tc"] != "untagged")]
            if self.loose is not None and self.loose > 0:
                self.drv.violation("lost", "c%d: half-closed, then closed with %d untagged request(s) unanswered" % (
                    self.cid, self.loose), self)
            if left:
                self.drv.violation("lost", "c%d: half-closed, then closed with %d request(s) unanswered: %s" % (
                    self.cid, len(left), b" | ".join(r["line"] for r in left[:3])), self)
        self.actor.on_close(self, t)

    def closed_why(self):
        if self.wild or self.drv.stopping or self.doomed == "violation":
            return "wild" if self.wild else self.doomed or "stopping"
        if not (self.dmn or self.drv.daemon).alive():
            return "crash"
        for why in ("BYE", "TOOBIG", "LIMIT", "wrong password"):
            if why in self.explained:
                return why
        if self.quit_sent:
            return "quit"
        if self.doomed == "toobig":
            return self.doomed
        if self.drv.password is not None and self.authed is not True:
            return "not authenticated"
        if self.shut_t is not None:
            return "shut"
        return None

    def pending(self):
        out = list(self.tagged.values()) + list(self.fifo) + list(self.badtag)
        return out + ([self.toobig] if self.toobig else [])

    def pending_text(self):
        p = self.pending()
        return "%d request(s) pending%s" % (len(p), (": " + repr(p[0]["line"])) if p else "")

    # -- closing
    def close(self, why):
        if self.state in ("closed", "eof"):
            return
        self.state = "closed"
        self.doomed = self.doomed or why
        self.drv.record(dict(k="close", c=self.cid, t=self.drv.now(), why=why))
        self.drv.detach(self)
        try:
            self.sock.close()
        except OSError:
            pass
        self.actor.on_close(self, self.drv.now())

    def shut(self):
        if self.state != "open":
            return
        self.flush()
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError as e:
            if e.errno != errno.ENOTCONN:
                raise
        if any(may_wait(r) for r in self.fifo):
            self.loose = sum(1 for r in self.fifo if not may_wait(r))
        self.state = "shut"
        self.doomed = self.doomed or "shut"
        self.shut_t = self.drv.now()
        self.drv.record(dict(k="shut", c=self.cid, t=self.shut_t))

    # -- deadlines
    def overdue(self, now):
        """The first request whose reply is overdue, or None (see Driver.deadline)."""
        if self.wild or self.broken or self.state in ("closed", "eof") or self.doomed == "moved":
            return None  # a connection whose session moved away is closed by the server, waits cancelled
        cands = list(self.tagged.values()) + list(self.badtag)
        if self.fifo and self.loose is None:
            cands.append(self.fifo[0])
        if self.toobig:
            cands.append(self.toobig)
        for r in cands:
            if "start" not in r or r["bound"] is None:
                continue
            if now > self.drv.deadline(r["start"], r["bound"], needs_redis(r)):
                return r
        return None


# QUIT reads its session's record before its OK (or closes unanswered when Redis does not answer).
REDIS_VERBS = ("LOCK", "UNLOCK", "ACQUIRE", "RELEASE", "LATCH", "COUNTDOWN", "AWAIT", "STATUS", "KILL", "FORCE",
               "LIST", "QUIT")


def needs_redis(r):
    """A request that may have to ask Redis (a malformed line too, if it names such a verb)."""
    if r.get("verb"):
        return r["verb"] in REDIS_VERBS
    words = r["line"].split()
    if words and words[0].startswith(b"#"):
        words = words[1:]
    return bool(words) and any(words[0].upper().startswith(v.encode()) for v in REDIS_VERBS)


def may_wait(r):
    """A request that may wait for a lock, permits or a latch (cancelled by a close)."""
    return r.get("verb") in ("LOCK", "ACQUIRE", "AWAIT") and r.get("wait") not in (None, 0)

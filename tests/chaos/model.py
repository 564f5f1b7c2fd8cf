"""model.py - checks the history of one chaos round for what dlockd promises about holds:

  double grant      two (session, owner)s hold one name at once in conflicting modes (or more
                    permits of a semaphore than its limit, or the name as a lock and a semaphore
                    at once) as far as dlockd told them
  token order       a new hold's fencing token is not above every token of that name read
                    before its request was sent (Redis restarts included), or two new holds share one
  vanished          ERR NOTHELD, or a new token, for a hold dlockd had confirmed and never
                    reported lost, with nothing in between that could have ended it
  phantom           dlockd re-entered or released a hold the session was never granted (a grant
                    that was answered TIMEOUT or BUSY that happened anyway; one answered ERR
                    BACKEND may have run just before Redis stopped answering, PROTOCOL.md section 2)
  outlived          a session resumed long after its ttl had run out

Input: the records chaos.py writes (req, rep, loose, ev, open, close, eof, shut, attach, sess, redis,
start, end), in the order they happened. Requests of one connection may run in another order
than they were sent (tagged ones at once, untagged ones one at a time), so a hold is built
from evidence, not replayed step by step: every grant reply with its token proves the hold
existed when dlockd ran that request (between the request's sending and the reply's reading).
The hold is *believed* from the first such reply read until the earliest sending of a request
that could have ended it after the last proof (an UNLOCK or RELEASE that left 0, an ERR NOTHELD,
a new token for the same session, owner and mode, a QUIT, a request that got no reply), or the
reading of its * LOST or the session's * BYE, or the moment the session may have expired (the
last line that surely reached dlockd, plus its ttl), or its lease= may have run out (counted from
the request's sending). An UNLOCK answered with an error changed nothing.

A hold is *at risk* - another grant while it is believed is then no violation by itself - from a
* JEOPARDY read on its session's connection (or the start of a Redis outage when the session had
no connection to hear it) and from a Redis restart that lost data, until * SAFE or a later reply
with its token confirms it - then every grant in between was a double grant - or * LOST ends it.
A Redis restarted without its data gets the holds written back (PROTOCOL.md, section 9): a * SAFE
after it confirms them, so a grant of their names in between is a double grant.
"""

import bisect

import grammar

INF = float("inf")
MS = 1_000_000
SLACK = 50 * MS        # clock granularity between dlockd, Redis and this process
OUTLIVE = 3000 * MS    # how late past its ttl a session may still be resumed


class Ev:
    """One reply or request that tells something about a hold."""
    __slots__ = ("kind", "rid", "send", "read", "seq", "conn", "token", "value", "immediate", "new", "replay",
                 "lease", "limit", "permits", "shared")

    def __init__(self, kind, req, rep, token=None, value=None, new=False, replay=None):
        self.kind, self.rid, self.send, self.conn = kind, req["r"], req["t"], req["c"]
        self.read, self.seq = (rep["t"], rep["q"]) if rep else (INF, INF)
        self.token, self.value, self.new, self.replay = token, value, new, replay
        self.permits = req.get("permits", 1)
        self.shared = req.get("mode") == "s"  # an UNLOCK that named its mode
        self.immediate = not (req.get("verb") in ("LOCK", "ACQUIRE") and req.get("wait") not in (None, 0))
        self.lease = req.get("lease")
        self.limit = req.get("limit")


class Hold:
    __slots__ = ("s", "sid", "owner", "name", "mode", "token", "evs", "start", "end", "why", "risks", "permits",
                 "limit", "first_send", "t0")

    def __init__(self, s, sid, slot, token, evs, t0):
        self.s, self.sid, self.owner, self.name, self.mode = s, sid, slot[1], slot[2], slot[3]
        self.token, self.evs, self.t0 = token, evs, t0
        self.start = min(e.read for e in evs)
        self.first_send = min(e.send for e in evs)
        self.end, self.why = INF, "round end"
        self.risks = []          # [from, to, outcome]: confirmed | lost | None (unresolved)
        self.permits = []        # [(t, permits)] for semaphores
        self.limit = max((e.limit or 0) for e in evs) or None

    def counted(self, t):
        """Believed at t, and not at risk then (or at risk and later confirmed)."""
        if not self.start <= t < self.end:
            return False
        return not any(f <= t < to and outcome != "confirmed" for f, to, outcome in self.risks)

    def at_risk(self, t):
        return any(f <= t < to for f, to, _ in self.risks)

    def permits_at(self, t):
        i = bisect.bisect_right(self.permits, (t, INF))
        return self.permits[i - 1][1] if i else 0

    def __repr__(self):
        return "session %s owner %r %s %s token=%s, believed %.3f-%s s (%s)" % (
            self.sid or "?", self.owner, {"x": "exclusive", "s": "shared", "p": "permits of"}[self.mode], self.name,
            self.token, (self.start - self.t0) / 1e9, "%.3f" % ((self.end - self.t0) / 1e9) if self.end < INF else "",
            self.why)


class Sess:
    def __init__(self, idx, ttl):
        self.idx, self.id = idx, None
        self.touches = []        # (sent, proven)
        self.ttls = [(0, ttl)]   # (from, ttl in force after a HELLO reply)
        self.pending_ttl = []    # (sent, answered, ttl asked)
        self.ttl_hi = ttl
        self.conns = [(0, None)]  # (from, cid) the session is attached to
        self.jeops, self.safes, self.byes, self.quits = [], [], [], []
        self.ids = {}            # id= -> the reply dlockd remembers, None when unknown
        self.id_reqs = {}        # id= -> rids
        self.gaps = []


class Checker:
    def __init__(self, records, cfg):
        self.recs = records
        self.cfg = cfg
        self.out = []
        for i, r in enumerate(records):
            r["q"] = i  # the order lines were read: reliable among the lines of one connection
        self.reqs = {r["r"]: r for r in records if r["k"] == "req"}
        self.reps = {r["r"]: r for r in records if r["k"] == "rep"}
        self.sess = {}
        self.conns = {}          # cid -> dict(sess=[(t, sidx)], closed=t, jeop=[(t, 'J'|'S')])
        self.slots = {}          # (sidx, owner, name, mode) -> dict(grants=[Ev], ends=[Ev], reqs=[rid], releases=[Ev])
        self.lost = {}           # (sidx, name, token) -> read time
        self.outages, self.losses = [], []
        self.t0 = records[0]["t"] if records else 0
        self.t_end = records[-1]["t"] if records else 0
        self.done = set()
        self.holds = []
        self.forces = {}         # name -> [Ev]: FORCE requests answered OK or not at all

    def flag(self, kind, msg):
        self.out.append((kind, msg))

    def ts(self, t):
        return "%.3f s" % ((t - self.t0) / 1e9)

    def session(self, idx):
        if idx not in self.sess:
            self.sess[idx] = Sess(idx, self.cfg["session_ttl_ms"])
        return self.sess[idx]

    def slot(self, key):
        if key not in self.slots:
            self.slots[key] = dict(grants=[], ends=[], reqs=[], releases=[])
        return self.slots[key]

    def run(self):
        self.prove()
        for rec in self.recs:
            getattr(self, "on_" + rec["k"])(rec)
        for s in self.sess.values():
            self.expiry_gaps(s)
        self.build()
        self.conflicts()
        self.tokens()
        return self.out

    # ------------------------------------------------------------------ pass 1: collect
    def prove(self):
        """A line surely reached dlockd when it, or a later line of its connection, was answered."""
        last = {}
        for r in reversed(self.recs):
            if r["k"] == "req":
                if r["r"] in self.reps:
                    last[r["c"]] = True
                r["proven"] = last.get(r["c"], False)

    def on_start(self, rec):
        pass

    on_shut = on_loose = on_start

    def on_sess(self, rec):
        self.session(rec["s"]).id = rec["id"]

    def on_end(self, rec):
        self.t_end = rec["t"]

    def attach(self, cid, sidx, t):
        c = self.conns[cid]
        old = c["sess"][-1][1]
        if old is not None and self.session(old).conns[-1][1] == cid:
            self.session(old).conns.append((t, None))
        if sidx is not None:
            s = self.session(sidx)
            prev = s.conns[-1][1]
            if prev is not None and prev != cid and prev in self.conns:
                self.conns[prev]["sess"].append((t, None))
            s.conns.append((t, cid))
        c["sess"].append((t, sidx))

    def on_open(self, rec):
        self.conns[rec["c"]] = dict(sess=[(rec["t"], None)], closed=INF, jeop=[])
        self.attach(rec["c"], rec["s"], rec["t"])

    def on_attach(self, rec):
        self.attach(rec["c"], rec["s"], rec["t"])

    def on_close(self, rec):
        c = self.conns.get(rec["c"])
        if c is not None and c["closed"] == INF:
            c["closed"] = rec["t"]
            self.attach(rec["c"], None, rec["t"])

    on_eof = on_close

    def on_redis(self, rec):
        if rec["what"] == "down":
            self.outages.append([rec["t"], INF])
        elif rec["what"] == "up":
            for o in self.outages:
                if o[1] == INF:
                    o[1] = rec["t"]
        elif rec["what"] == "lost":
            self.losses.append((rec["t"], bool(rec.get("empty"))))

    def on_ev(self, rec):
        ev = grammar.parse_event(rec["line"])
        s, t = self.session(rec["s"]), rec["t"]
        if ev[0] == "LOST":
            self.lost.setdefault((rec["s"], ev[1], ev[2]), (t, ev[3]))
        elif ev[0] == "JEOPARDY":
            s.jeops.append((t, rec["c"], rec["q"]))
            self.conns[rec["c"]]["jeop"].append(((t, rec["q"]), "J"))
        elif ev[0] == "SAFE":
            s.safes.append((t, rec["c"], rec["q"]))
            self.conns[rec["c"]]["jeop"].append(((t, rec["q"]), "S"))
        elif ev[0] == "BYE" and ev[1] in ("expired", "shutdown"):
            s.byes.append(t)

    def on_req(self, rec):
        s, t, v = self.session(rec["s"]), rec["t"], rec.get("verb")
        if rec["tc"] != "toobig":
            s.touches.append((t, rec["proven"]))
        rep = self.reps.get(rec["r"])
        if v is None or not rec.get("wellformed"):
            return
        if rec.get("amb") is not None:
            return self.ambiguous(rec)
        if v == "KILL" and rec.get("victim") is not None and rep is None:
            self.session(rec["victim"]).quits.append((t, INF))
        if v == "FORCE" and rep is None:
            self.forces.setdefault(rec["names"][0], []).append(Ev("force", rec, None))
        if v in ("LOCK", "ACQUIRE", "UNLOCK", "RELEASE"):
            for key in self.keys(rec):
                self.slot(key)["reqs"].append(rec["r"])
            if rec.get("id"):
                s.id_reqs.setdefault(rec["id"], []).append(rec["r"])
                if rep is None and v in ("LOCK", "ACQUIRE"):
                    s.ids.setdefault(rec["id"], None)
        if rep is None and v in ("UNLOCK", "RELEASE"):
            for key in self.keys(rec):
                self.slot(key)["ends"].append(Ev("noreply", rec, None))
        if v == "QUIT" and rep is None:
            s.quits.append((t, INF))
        if v == "HELLO" and rec.get("ttl"):
            ttl = min(max(rec["ttl"], self.cfg["ttl_min_ms"]), self.cfg["ttl_max_ms"])
            tgt = self.session(rec["target"]) if rec.get("target") is not None else s
            tgt.pending_ttl.append((t, rep["t"] if rep else INF, ttl))
            tgt.ttl_hi = max(tgt.ttl_hi, ttl)

    def ambiguous(self, rec):
        """A request sent behind a HELLO session= not yet answered runs for the connection's own
        session or for the resumed one: its grants prove nothing, and whatever could end a
        hold may have ended one of either session."""
        v = rec["verb"]
        for sidx in (rec["s"], rec["amb"]):
            if v in ("LOCK", "ACQUIRE", "UNLOCK", "RELEASE"):
                for key in self.keys(dict(rec, s=sidx)):
                    self.slot(key)["reqs"].append(rec["r"])
                    if v in ("UNLOCK", "RELEASE"):
                        self.slot(key)["ends"].append(Ev("noreply", rec, None))
            if v == "QUIT":
                self.session(sidx).quits.append((rec["t"], INF))
        if rec.get("id"):
            for sidx in (rec["s"], rec["amb"]):
                s = self.session(sidx)
                s.id_reqs.setdefault(rec["id"], []).append(rec["r"])
                s.ids[rec["id"]] = None  # which reply dlockd remembers for it is not known

    def keys(self, req):
        """The (session, owner, name, mode) slots a request may act on."""
        v = req["verb"]
        modes = ["p"] if v in ("ACQUIRE", "RELEASE") else [req["mode"]] if req.get("mode") else ["x", "s"]
        return [(req["s"], req.get("owner", ""), n, m) for n in req["names"] for m in modes]

    def on_rep(self, rec):
        req = self.reqs[rec["r"]]
        self.done.add(rec["r"])
        v = req.get("verb")
        if v is None or not req.get("wellformed") or req.get("amb") is not None:
            return
        r = grammar.parse_reply(rec["line"])
        s = self.session(req["s"])
        try:
            getattr(self, "rep_" + v.lower(), lambda *a: None)(s, req, r, rec)
        except (KeyError, ValueError):
            pass  # a malformed reply was reported as it arrived
        if req.get("id") and v in ("LOCK", "ACQUIRE", "UNLOCK", "RELEASE") and r.kind != "BACKEND":
            s.ids[req["id"]] = r.body  # what dlockd remembers for the id now

    def replay(self, s, req, r):
        """'yes' when the reply repeats the one remembered for its id= (nothing was done),
        'maybe' when that cannot be told, else None."""
        rid = req.get("id")
        if not rid:
            return None
        if any(x != req["r"] and x not in self.done and self.reqs[x]["t"] < req["t"] and
               self.conns[self.reqs[x]["c"]]["closed"] > req["t"] for x in s.id_reqs[rid]):
            return "maybe"  # an earlier request with this id still runs: this one waits for its reply
        if rid not in s.ids:
            return None
        return "maybe" if s.ids[rid] is None else "yes" if s.ids[rid] == r.body else None

    def rep_lock(self, s, req, r, got):
        if r.kind != "OK":
            return
        if len(req["names"]) == 1:
            toks, counts = [int(r.fields["token"])], [int(r.fields["count"])]
        else:
            toks = [int(x) for x in r.fields["tokens"].split(",")]
            counts = [int(x) for x in r.fields["counts"].split(",")]
        again = self.replay(s, req, r)
        for key, tok, cnt in zip(self.keys(req), toks, counts):
            self.slot(key)["grants"].append(Ev("grant", req, got, tok, cnt, new=cnt == 1 and again is None,
                                               replay=again))

    def rep_acquire(self, s, req, r, got):
        if r.kind != "OK":
            return
        held = int(r.fields["held"])
        again = self.replay(s, req, r)
        key = self.keys(req)[0]
        self.slot(key)["grants"].append(Ev("grant", req, got, int(r.fields["token"]), held,
                                           new=held == req["permits"] and again is None, replay=again))

    def rep_unlock(self, s, req, r, got):
        if r.kind == "OK":
            counts = [int(x) for x in (r.fields.get("count") or r.fields.get("counts", "")).split(",") if x]
            modes = 1 if req.get("mode") else 2
            for i, key in enumerate(self.keys(req)):
                if i // modes < len(counts) and counts[i // modes] == 0:
                    self.slot(key)["ends"].append(Ev("unlock", req, got))
            self.phantom(req, r, got["t"])
        elif r.kind == "NOTHELD":
            kind = "notheld" if len(req["names"]) == 1 else "notheld-some"
            for key in self.keys(req):
                self.slot(key)["ends"].append(Ev(kind, req, got))

    def rep_release(self, s, req, r, got):
        key = self.keys(req)[0]
        if r.kind == "OK":
            held = int(r.fields["held"])
            self.slot(key)["releases"].append(Ev("release", req, got, value=held))
            if held == 0:
                self.slot(key)["ends"].append(Ev("unlock", req, got))
            self.phantom(req, r, got["t"])
        elif r.kind == "NOTHELD" and req["permits"] == 1:
            self.slot(key)["ends"].append(Ev("notheld", req, got))  # more permits than held leaves them

    def rep_hello(self, s, req, r, got):
        if r.kind != "OK":
            return
        t = got["t"]
        ttl = int(r.fields["ttl"])
        tgt = self.session(req["target"]) if req.get("target") is not None else s
        tgt.ttls.append((t, ttl))
        tgt.ttl_hi = max(tgt.ttl_hi, ttl)
        if req.get("target") is not None:
            last = max((x for x, _ in tgt.touches if x < req["t"]), default=None)
            if last is not None and req["t"] > last + tgt.ttl_hi * MS + OUTLIVE:
                self.flag("outlived", "session %s resumed at %s, %.1f s after the last line sent on it (ttl %d ms)"
                          % (tgt.id, self.ts(t), (req["t"] - last) / 1e9, tgt.ttl_hi))
            bisect.insort(tgt.touches, (req["t"], True))

    def rep_quit(self, s, req, r, got):
        if r.kind == "OK":
            s.quits.append((req["t"], got["t"]))

    def rep_kill(self, s, req, r, got):
        """KILL ends its victim as a QUIT would (ERR NOSESSION or BACKEND: nothing changed)."""
        if r.kind == "OK" and req.get("victim") is not None:
            self.session(req["victim"]).quits.append((req["t"], got["t"]))

    def rep_force(self, s, req, r, got):
        if r.kind == "OK":
            self.forces.setdefault(req["names"][0], []).append(Ev("force", req, got))

    def phantom(self, req, r, t):
        """UNLOCK or RELEASE OK where every grant request ever sent for it was refused."""
        if self.losses and self.losses[0][0] < t:
            return
        for key in self.keys(req):
            for rid in self.slots[key]["reqs"]:
                q = self.reqs[rid]
                if q["verb"] in ("LOCK", "ACQUIRE") and q["t"] < t:
                    rep = self.reps.get(rid)
                    # A grant answered ERR BACKEND may have run in Redis just before it stopped
                    # answering: it is undone, but the session's own UNLOCK can meet it first
                    # (PROTOCOL.md, section 2, BACKEND).
                    if rep is None or grammar.parse_reply(rep["line"]).kind in ("OK", "BACKEND"):
                        return
        self.flag("phantom", "%s (session %s) at %s released a hold it was never granted: %s" % (
            req["line"], self.session(req["s"]).id, self.ts(t), r.body))

    # ------------------------------------------------------------------ pass 2: holds
    def ttl_at(self, s, t):
        i = bisect.bisect_right(s.ttls, (t, INF))
        ttl = s.ttls[i - 1][1]
        for sent, answered, asked in s.pending_ttl:
            if sent <= t < answered:
                ttl = min(ttl, asked)
        return ttl

    def expiry_gaps(self, s):
        """The moments s may have expired: a proven line plus the ttl, with no proven line before."""
        proven = sorted(x for x, p in s.touches if p)
        for i, x in enumerate(proven):
            tau = x + self.ttl_at(s, x) * MS - SLACK
            if i + 1 == len(proven) or proven[i + 1] > tau:
                s.gaps.append(tau)

    def conn_at(self, s, t):
        i = bisect.bisect_right(s.conns, t, key=lambda x: x[0])
        return s.conns[i - 1][1] if i else None

    def jeopardy_at(self, cid, when):
        """Whether cid had read * JEOPARDY and no * SAFE since, at `when` (time, read order)."""
        state = None
        for at, what in self.conns[cid]["jeop"]:
            if at > when:
                break
            state = what
        return state == "J"

    def build(self):
        """One Hold per stretch of belief: from a proof's reading until the earliest end that
        may have followed it; a proof read before that end extends the stretch."""
        for key, sl in self.slots.items():
            s = self.session(key[0])
            by_tok = {}
            for g in sl["grants"]:
                by_tok.setdefault(g.token, []).append(g)
            for tok, evs in by_tok.items():
                evs.sort(key=lambda g: g.read)
                evs = self.stale(key, s, sl, evs)
                born = min(g.send for g in evs)
                lease = min([born + g.lease * MS - SLACK for g in evs if g.lease] + [INF])
                stretch = None
                lost = self.lost.get((key[0], key[2], tok))
                if lost is not None and lost[1] == "lease" and lease == INF:
                    self.flag("lost reason", "* LOST %s token=%s reason=lease at %s for a hold taken without lease="
                              " (session %s)" % (key[2], tok, self.ts(lost[0]), s.id))
                for g in evs:
                    end, why = self.end_after(g, key, s, sl, lease)
                    if stretch is not None and g.read < stretch.end:
                        stretch.evs.append(g)
                        if end > stretch.end:
                            stretch.end, stretch.why = end, why
                        continue
                    stretch = Hold(key[0], s.id, key, tok, [g], self.t0)
                    stretch.end, stretch.why = max(end, g.read), why
                    self.holds.append(stretch)
        for h in self.holds:
            sl = self.slots[(h.s, h.owner, h.name, h.mode)]
            s = self.session(h.s)
            if h.mode == "p":
                self.permits(h, sl)
            self.risks(h, s)
            self.vanished(h, s, sl)

    def stale(self, key, s, sl, evs):
        """Drops (and reports) the replays of a grant sent after its hold surely ended."""
        out = []
        for g in evs:
            if g.replay == "yes" and out:
                # an UNLOCK without `shared` ends a shared hold only when there is no exclusive one
                # An ERR NOTHELD for a release sent before the grant was read is "not yours
                # yet" (a hold granted to a request still waiting here), not an end.
                ended = [e.read for e in sl["ends"] if e.kind in ("unlock", "notheld") and
                         (e.read < g.send or self.surely_after(g, e)) and
                         (key[3] != "s" or e.kind == "notheld" or e.shared or self.never_exclusive(key, e.read)) and
                         any(e.send > o.read if e.kind == "notheld" else self.surely_after(e, o) for o in out)]
                lost = self.lost.get((key[0], key[2], g.token))
                if lost is not None and out[0].read < lost[0] < g.send:
                    ended.append(lost[0])
                if ended:
                    self.flag("stale replay", "%s (session %s) at %s replayed the grant of token %s, a hold that "
                              "had ended at %s" % (self.reqs[g.rid]["line"], s.id, self.ts(g.read), g.token,
                                                    self.ts(min(ended))))
                    continue
            out.append(g)
        return out

    def never_exclusive(self, key, t):
        """The session and owner asked for no exclusive hold of the name before t (but were
        refused with BUSY): an UNLOCK without `shared` then acted on the shared hold."""
        x = self.slots.get((key[0], key[1], key[2], "x"), dict(reqs=[]))
        return all(self.reqs[r]["verb"] != "LOCK" or self.reqs[r]["t"] >= t or
                   (r in self.reps and grammar.parse_reply(self.reps[r]["line"]).kind == "BUSY") for r in x["reqs"])

    def surely_after(self, e, g):
        """e ran after g: sent after g's reply was read, or answered after it on the same
        connection (one daemon answers in the order Redis ran the scripts)."""
        return e.send > g.read or (e.conn == g.conn and (e.read, e.seq) > (g.read, g.seq))

    def after(self, e, g):
        """e (a request that could end a hold) may have run after g (a proof of the hold)."""
        if e.read <= g.send:
            return False
        if e.conn == g.conn and e.read < g.read and g.immediate:
            return False  # answered first on the same connection: it ran first
        return True

    def end_after(self, g, key, s, sl, lease):
        """The earliest moment a hold proved by g may have ended, and why."""
        cands = [(self.t_end, "round end"), (lease, "lease=")]
        cands += [(e.send, e.kind) for e in sl["ends"] if self.after(e, g)]
        cands += [(o.send, "token %s granted anew" % o.token) for o in sl["grants"]
                  if o.token != g.token and o.new and self.after(o, g)]
        lost = self.lost.get((key[0], key[2], g.token))
        if lost is not None and lost[0] > g.send:
            cands.append((lost[0], "* LOST reason=" + lost[1]))
        cands += [(b, "* BYE") for b in s.byes if b > g.send]
        cands += [(sent, "QUIT or KILL") for sent, ans in s.quits if ans > g.send]
        cands += [(f.send, "FORCE") for f in self.forces.get(key[2], []) if f.read > g.send]
        i = bisect.bisect_left(s.gaps, g.send)
        if i < len(s.gaps):
            cands.append((s.gaps[i], "the session may have expired"))
        return min(cands, key=lambda c: c[0])

    def permits(self, h, sl):
        """Permits held over time: the value of the last reply read (the smallest of replies read
        together), and while a RELEASE is on its way, no more than it leaves."""
        # a replayed reply (id=) tells the permits of its first answer, not the ones held now:
        # it counts only until a fresh reply is read
        done = [(g.read, g.value) for g in h.evs if g.replay is None] or [(h.start, 1)]
        replays = [(g.read, g.value) for g in h.evs if g.replay is not None]
        rel = [e for e in sl["releases"] if e.send < h.end and e.read > h.first_send]
        done += [(e.read, e.value) for e in rel]
        marks = sorted({max(t, h.start) for t, _ in done} | {max(e.send, h.start) for e in rel})
        out = []
        for m in marks:
            seen = [(t, v) for t, v in done if t <= m] or [(t, v) for t, v in replays if t <= m] or [(h.start, 1)]
            last = max(t for t, _ in seen)
            v = min(v for t, v in seen if t == last)
            out.append((m, min([v] + [e.value for e in rel if e.send <= m < e.read])))
        h.permits = out

    def risks(self, h, s):
        """The stretches of h at risk, each (from, to, outcome); from/to compare with read order
        too, since * SAFE and a grant read in one pass are ordered on their connection."""
        wins = []
        first = min(h.evs, key=lambda g: (g.read, g.seq))
        if self.jeopardy_at(first.conn, (first.read, first.seq)):
            wins.append((first.read, first.seq))
        wins += [(t, q) for t, _, q in s.jeops if h.start <= t < h.end]
        for down, up in self.outages:
            if down >= h.end or up <= h.start:
                continue
            f = max(down, h.start)
            cid = self.conn_at(s, f)
            heard = [t for t, c, _ in s.jeops if t >= down and c == cid]
            left = next((t for t, c in s.conns if t > f and c != cid), INF)
            if cid is None or left < min(heard + [INF]):
                wins.append((f, -1))
        wins += [(max(k, h.start), -1) for k, _ in self.losses if h.first_send < k < h.end]
        lost = self.lost.get((h.s, h.name, h.token))
        for f in sorted(set(wins)):
            ends = [(t, "confirmed") for t, _, q in s.safes if (t, q) > f and t < h.end]
            ends += [(g.read, "confirmed") for g in h.evs if g.send > f[0] and g.read < h.end]
            if lost is not None and lost[0] >= f[0]:
                ends.append((lost[0], "lost"))
            to, outcome = min(ends + [(h.end, None)], key=lambda e: e[0])
            h.risks.append((f[0], to, outcome if to <= h.end else None))

    def quiet(self, sl, rid):
        """No other request that changes these holds was in flight while rid ran."""
        q = self.reqs[rid]
        end = self.reps[rid]["t"] if rid in self.reps else INF
        for r in sl["reqs"]:
            o = self.reqs[r]
            if r != rid and o["t"] < end and self.reps.get(r, {"t": INF})["t"] > q["t"]:
                return False
        return True

    def vanished(self, h, s, sl):
        """ERR NOTHELD or a new token for a confirmed hold, nothing in between that could end it."""
        last = max(g.read for g in h.evs)
        news = [g for g in sl["grants"] if g.new and g.token != h.token]
        proof = max(g.send for g in h.evs)
        lost = self.lost.get((h.s, h.name, h.token))
        for e in [e for e in sl["ends"] if e.kind == "notheld"] + news:
            if e.send != h.end or not last < e.send or not self.quiet(sl, e.rid) or h.at_risk(e.read):
                continue
            if any(proof < k < e.read for k, _ in self.losses) or any(d < e.read and u > proof
                                                                        for d, u in self.outages):
                continue  # Redis lost data or was away: the hold may have lapsed
            if lost is not None and lost[0] <= e.read or any(h.start <= t <= e.read for t, _, _ in s.jeops):
                continue
            if any(f.send < e.read and f.read > proof for f in self.forces.get(h.name, [])) or \
                    any(sent < e.read and ans > proof for sent, ans in s.quits):
                continue  # the operator freed it (FORCE, KILL): its * LOST may come later
            if h.mode == "p" and e.kind == "notheld" and h.permits_at(e.send) < e.permits:
                continue
            self.flag("vanished", "%s at %s: %s for %r, which was never reported lost" % (
                self.reqs[e.rid]["line"], self.ts(e.read), "ERR NOTHELD" if e.kind == "notheld" else
                "a new hold with token %s" % e.token, h))
            return

    # ------------------------------------------------------------------ checks
    def conflicts(self):
        by_name = {}
        for h in self.holds:
            if h.end > h.start:
                by_name.setdefault(h.name, []).append(h)
        for name, hs in by_name.items():
            hs.sort(key=lambda h: h.start)
            active = []
            for h2 in hs:
                t = h2.start
                active = [h for h in active if h.end > t]
                if h2.counted(t):
                    others = [h for h in active if h.counted(t) and (h.s, h.owner) != (h2.s, h2.owner)]
                    for h1 in others:
                        if h1.mode == h2.mode and h1.mode in ("s", "p"):
                            continue
                        self.flag("double grant", "%s at %s while %r" % (self.describe(h2), self.ts(t), h1))
                    if h2.mode == "p":
                        self.semaphore(h2, [h for h in others if h.mode == "p"], t)
                active.append(h2)
            for h in hs:
                prev = 0
                for t, p in h.permits:
                    if p > prev and t > h.start and h.counted(t):
                        self.semaphore(h, [o for o in hs if o is not h and o.mode == "p" and o.counted(t)], t)
                    prev = p

    def semaphore(self, h, others, t):
        total = h.permits_at(t) + sum(o.permits_at(t) for o in others)
        limits = {x.limit for x in others + [h]}
        if total > (h.limit or 0) or len(limits) > 1:
            self.flag("double grant", "semaphore %s: %d permits held at %s, limit %s: %r; %s" % (
                h.name, total, self.ts(t), "/".join(str(x) for x in sorted(limits)), h,
                "; ".join(repr(o) for o in others)))

    def describe(self, h):
        return "%s %s (token %s) granted to session %s owner %r" % (
            {"x": "exclusive", "s": "shared", "p": "permits of"}[h.mode], h.name, h.token, h.sid or "?", h.owner)

    def tokens(self):
        by_name = {}
        for key, sl in self.slots.items():
            for g in sl["grants"]:
                if g.new:
                    by_name.setdefault(key[2], []).append((g, key))
        for name, gs in by_name.items():
            seen = {}
            for g, key in gs:
                if g.token in seen and seen[g.token][1] != key:
                    self.flag("token order", "%s: token %s granted to two holds (%s, requests at %s and %s)" % (
                        name, g.token, self.reqs[g.rid]["line"], self.ts(seen[g.token][0].send), self.ts(g.send)))
                seen[g.token] = (g, key)
            by_read = sorted(gs, key=lambda x: x[0].read)
            j, best = 0, None
            for g, key in sorted(gs, key=lambda x: x[0].send):
                while j < len(by_read) and by_read[j][0].read < g.send:
                    if best is None or by_read[j][0].token > best.token:
                        best = by_read[j][0]
                    j += 1
                if best is not None and g.token <= best.token and best is not g:
                    self.flag("token order", "%s: %s sent at %s got token %s, not above token %s read at %s" % (
                        name, self.reqs[g.rid]["line"], self.ts(g.send), g.token, best.token, self.ts(best.read)))


def check(records, cfg):
    """[(kind, message)] for one round's records (see the module comment)."""
    return Checker(records, cfg).run()

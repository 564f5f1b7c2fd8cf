#!/usr/bin/env python3
"""test_model.py - the chaos checker's self-test: hand-made histories that model.py must
flag (a double grant, an ERR BACKEND that released anyway, a hold kept through * SAFE after
Redis lost it, a token out of order, a stale replay, a semaphore over its limit) and
legitimate ones it must pass (pipelined LOCK and UNLOCK, a grant after * JEOPARDY and
* LOST, after a lease ran out, after the session may have expired, the replay of a shared
grant that an UNLOCK of the exclusive hold left alone, FORCE and KILL; requests pipelined behind
a resume); and lines grammar.py must refuse. Exit status 0 when every case gives what it should.
"""

import os
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grammar  # noqa: E402
import model  # noqa: E402

MS = 1_000_000
CFG = dict(session_ttl_ms=3000, ttl_min_ms=1000, ttl_max_ms=3600000)


class History:
    """Records as chaos.py writes them; times in ms. Session i is on connection i."""

    def __init__(self, sessions=2):
        self.recs = [dict(k="start", t=0)]
        self.n = 0
        for i in range(sessions):
            self.add(k="open", c=i, s=i, t=0)
            self.add(k="sess", s=i, id="%016x" % (i + 1), t=0)

    def add(self, **kv):
        kv["t"] = int(kv["t"] * MS)
        self.recs.append(kv)

    def req(self, t, s, line, reply=None, at=None, **meta):
        """A request on session s's connection, and its reply read at `at`."""
        self.n += 1
        p = line.split()
        verb = p[0]
        names = [x for x in p[1:] if "=" not in x and x not in ("shared", "all")]
        rec = dict(k="req", r=self.n, c=s, t=t, s=s, line=line, tc="untagged", verb=verb, names=names,
                   owner="", wellformed=True)
        if "shared" in p:
            rec["mode"] = "s"
        elif verb == "LOCK":
            rec["mode"] = "x"
        for x in p[1:]:
            if "=" in x:
                k, v = x.split("=", 1)
                rec[k] = int(v) if v.isdigit() else v
        rec.update(meta)
        self.add(**rec)
        if reply is not None:
            self.add(k="rep", c=s, r=self.n, t=at if at is not None else t + 1, line=reply)
        return self.n

    def ev(self, t, s, line):
        self.add(k="ev", c=s, s=s, t=t, line=line)

    def check(self):
        self.recs.sort(key=lambda r: r["t"])
        self.add(k="end", t=self.recs[-1]["t"] / MS + 1)
        return {k for k, _ in model.check(self.recs, CFG)}


def heartbeats(h, s, until, every=500):
    for t in range(every, until, every):
        h.req(t, s, "PING", "OK")


def case_double_grant():
    h = History()
    heartbeats(h, 0, 3000)
    h.req(10, 0, "LOCK x", "OK token=10 count=1")
    h.req(100, 1, "LOCK x", "OK token=11 count=1")
    return h.check(), {"double grant"}


def case_pipelined_unlock():
    h = History()
    heartbeats(h, 0, 3000)
    h.req(10, 0, "LOCK x", "OK token=10 count=1", at=11)
    h.req(20, 0, "LOCK x", "OK token=10 count=2", at=30)  # read after the UNLOCKs were sent
    h.req(21, 0, "UNLOCK x", "OK count=1", at=29)
    h.req(21, 0, "UNLOCK x", "OK count=0", at=31)
    h.req(100, 1, "LOCK x", "OK token=11 count=1")
    return h.check(), set()


def case_unlock_backend():
    h = History()
    heartbeats(h, 0, 3000)
    h.req(10, 0, "LOCK x", "OK token=10 count=1")
    h.req(50, 0, "UNLOCK x", "ERR BACKEND Redis did not answer in time", at=1100)
    h.req(200, 1, "LOCK x", "OK token=11 count=1")
    return h.check(), {"double grant"}


def case_jeopardy_lost():
    h = History()
    heartbeats(h, 0, 3000)
    h.req(10, 0, "LOCK x", "OK token=10 count=1")
    h.ev(500, 0, "* JEOPARDY")
    h.req(2000, 1, "LOCK x", "OK token=11 count=1")
    h.ev(2100, 0, "* LOST x token=10 reason=backend")
    h.ev(2100, 0, "* SAFE")
    return h.check(), set()


def case_jeopardy_safe():
    h = History()
    heartbeats(h, 0, 3000)
    h.req(10, 0, "LOCK x", "OK token=10 count=1")
    h.ev(500, 0, "* JEOPARDY")
    h.req(2000, 1, "LOCK x", "OK token=11 count=1")
    h.ev(2100, 0, "* SAFE")
    return h.check(), {"double grant"}


def case_restart_empty():
    """dlockd writes the hold back to the empty Redis: SAFE, no LOST, and the hold goes on."""
    h = History()
    heartbeats(h, 0, 3000)
    h.req(10, 0, "LOCK x", "OK token=10 count=1")
    h.add(k="redis", what="down", t=500)
    h.add(k="redis", what="lost", t=500, empty=True)
    h.ev(501, 0, "* JEOPARDY")
    h.add(k="redis", what="up", t=900)
    h.ev(1000, 0, "* SAFE")
    h.req(1500, 0, "LOCK x", "OK token=10 count=2")
    return h.check(), set()


def case_restart_empty_granted_before_safe():
    """Another session granted the name after the restart, before the hold was confirmed back."""
    h = History()
    heartbeats(h, 0, 3000)
    heartbeats(h, 1, 3000)
    h.req(10, 0, "LOCK x", "OK token=10 count=1")
    h.add(k="redis", what="down", t=500)
    h.add(k="redis", what="lost", t=500, empty=True)
    h.ev(501, 0, "* JEOPARDY")
    h.add(k="redis", what="up", t=900)
    h.req(950, 1, "LOCK x", "OK token=11 count=1")
    h.ev(1000, 0, "* SAFE")
    return h.check(), {"double grant"}


def case_restart_empty_lost():
    h = History()
    heartbeats(h, 0, 3000)
    h.req(10, 0, "LOCK x", "OK token=10 count=1")
    h.add(k="redis", what="down", t=500)
    h.add(k="redis", what="lost", t=500, empty=True)
    h.ev(501, 0, "* JEOPARDY")
    h.add(k="redis", what="up", t=900)
    h.req(950, 1, "LOCK x", "OK token=20 count=1")
    h.ev(1000, 0, "* LOST x token=10 reason=backend")
    h.ev(1000, 0, "* SAFE")
    return h.check(), set()


def case_token_order():
    h = History()
    h.req(10, 0, "LOCK x", "OK token=10 count=1")
    h.req(20, 0, "UNLOCK x", "OK count=0")
    h.req(30, 1, "LOCK x", "OK token=9 count=1")
    return h.check(), {"token order"}


def case_lease():
    h = History()
    heartbeats(h, 0, 3000)
    h.req(10, 0, "LOCK x lease=500", "OK token=10 count=1", lease=500)
    h.req(600, 1, "LOCK x", "OK token=11 count=1")
    return h.check(), set()


def case_lease_early():
    h = History()
    heartbeats(h, 0, 3000)
    h.req(10, 0, "LOCK x lease=500", "OK token=10 count=1", lease=500)
    h.req(300, 1, "LOCK x", "OK token=11 count=1")
    return h.check(), {"double grant"}


def case_expiry():
    h = History()
    h.req(10, 0, "LOCK x", "OK token=10 count=1")
    h.req(3200, 1, "LOCK x", "OK token=11 count=1")  # session 0 sent nothing for its ttl (3 s)
    return h.check(), set()


def case_stale_replay():
    h = History()
    heartbeats(h, 0, 3000)
    h.req(10, 0, "LOCK x id=i1", "OK token=10 count=1", id="i1")
    h.req(20, 0, "UNLOCK x", "OK count=0")
    h.req(30, 1, "LOCK x", "OK token=11 count=1")
    h.req(40, 0, "LOCK x id=i1", "OK token=10 count=1", id="i1")
    return h.check(), {"stale replay"}


def case_replay_after_early_release():
    # RELEASE sent while the ACQUIRE still waited: Redis ran it after the grant, but the
    # grant was not answered yet, so it is ERR NOTHELD and the hold stays; a replay is fine
    h = History()
    heartbeats(h, 0, 3000)
    h.req(10, 0, "ACQUIRE s limit=3 permits=2 wait=500 id=i1", "OK token=10 held=2 free=1", at=30,
          id="i1", permits=2, limit=3, wait=500)
    h.req(20, 0, "RELEASE s", "ERR NOTHELD 's' is not held by this session and owner", at=31, permits=1)
    h.req(40, 0, "ACQUIRE s limit=3 permits=2 wait=500 id=i1", "OK token=10 held=2 free=1", id="i1",
          permits=2, limit=3, wait=500)
    return h.check(), set()


def case_replay_shared_kept():
    h = History()
    heartbeats(h, 0, 3000)
    h.req(10, 0, "LOCK x", "OK token=10 count=1")
    h.req(20, 0, "LOCK x shared id=i1", "OK token=11 count=1", id="i1")
    h.req(30, 0, "UNLOCK x", "OK count=0")  # the exclusive hold: the shared one stays
    h.req(40, 0, "LOCK x shared id=i1", "OK token=11 count=1", id="i1")
    h.req(50, 1, "LOCK x shared", "OK token=12 count=1")
    return h.check(), set()


def case_semaphore():
    h = History(3)
    heartbeats(h, 0, 3000)
    heartbeats(h, 1, 3000)
    h.req(10, 0, "ACQUIRE s limit=2", "OK token=10 held=1 free=1", permits=1, limit=2)
    h.req(20, 1, "ACQUIRE s limit=2", "OK token=11 held=1 free=0", permits=1, limit=2)
    h.req(30, 2, "ACQUIRE s limit=2", "OK token=12 held=1 free=0", permits=1, limit=2)
    return h.check(), {"double grant"}


def case_semaphore_pipelined():
    h = History(2)
    heartbeats(h, 0, 3000)
    h.req(10, 0, "ACQUIRE s limit=2 permits=2", "OK token=10 held=2 free=0", permits=2, limit=2, at=12)
    h.req(11, 0, "RELEASE s", "OK held=1 free=1", permits=1, at=13)
    h.req(50, 1, "ACQUIRE s limit=2", "OK token=11 held=1 free=0", permits=1, limit=2)
    return h.check(), set()


def case_phantom():
    h = History()
    h.req(10, 0, "LOCK x", "BUSY holder=- ttl=0", at=12)
    h.req(1100, 0, "UNLOCK x", "OK count=0")
    return h.check(), {"phantom"}


def case_unlock_after_backend():
    """A LOCK answered ERR BACKEND may have been granted just before Redis stopped answering
    (PROTOCOL.md section 2): the session's own UNLOCK meeting that hold is no phantom."""
    h = History()
    h.req(10, 0, "LOCK x", "ERR BACKEND Redis did not answer in time", at=1010)
    h.req(1100, 0, "UNLOCK x", "OK count=0")
    return h.check(), set()


def case_permits_replay_first():
    """The permits of a hold whose first evidence is a replayed reply, with a RELEASE sent before
    it and read with the first fresh reply (chaos seed 128761 in CI): the checker used to find no
    reply at the hold's start and crash."""
    ev = types.SimpleNamespace
    h = ev(start=643, first_send=444, end=1776, evs=[ev(read=643, value=2, replay="maybe"),
                                                     ev(read=643, value=2, replay="yes"),
                                                     ev(read=854, value=2, replay=None)])
    sl = {"releases": [ev(send=549, read=854, value=1)]}
    model.Checker.permits(None, h, sl)
    return ({"crash"} if not h.permits or h.permits[0] != (643, 1) else set()), set()


def case_resume_pipelined_lock():
    """Session 0 holds x and resumes elsewhere with a LOCK x pipelined behind the HELLO (it may run
    for either session: it proves and ends nothing); another session granted x meanwhile is a
    double grant (issue 21: the LOCK ran while the resume adopted the holds)."""
    h = History(3)
    heartbeats(h, 0, 3000)
    heartbeats(h, 1, 3000)
    h.req(10, 0, "LOCK x", "OK token=10 count=1")
    h.req(200, 2, "LOCK x wait=2000", "OK token=11 count=1", at=402, tc="tagged")
    h.req(400, 2, "LOCK x wait=0", "BUSY holder=a ttl=1", amb=0)
    return h.check(), {"double grant"}


def case_resume_pipelined_unlock():
    """An UNLOCK pipelined behind a resume may have released the resumed session's hold, whatever
    the answer says: a grant to another session after it is none."""
    h = History(3)
    heartbeats(h, 0, 3000)
    h.req(10, 0, "LOCK x", "OK token=10 count=1")
    h.req(400, 2, "UNLOCK x", "ERR NOTHELD not held", amb=0)
    h.req(450, 1, "LOCK x", "OK token=11 count=1")
    return h.check(), set()


def case_force_kill():
    """FORCE of a name, and KILL of a session, end holds before their * LOST is read."""
    h = History(4)
    for s in range(4):
        heartbeats(h, s, 3000)
    h.req(10, 0, "LOCK x", "OK token=10 count=1")
    h.req(100, 2, "FORCE x", "OK count=1")
    h.req(102, 1, "LOCK x", "OK token=11 count=1")
    h.req(200, 1, "LOCK y", "OK token=20 count=1")
    h.req(300, 2, "KILL 0000000000000002", "OK", victim=1)
    h.req(302, 3, "LOCK y", "OK token=21 count=1")
    return h.check(), set()


BAD_LINES = ["OK token=1  count=1", "#bad! OK", "ERR FROB text", "ERR SYNTAX", "OK {\"a\":", "TIMEOUT x=1",
             "OK a=1 a=2", "OK\tx=1", "OK x=1\r", "OK x=\x00"]
BAD_EVENTS = ["* LOST x token=1", "* LOST x reason=lease", "* BYE", "* BYE reason=later", "* HELLO", "*  SAFE"]


def main():
    failed = 0
    cases = [(n, f) for n, f in sorted(globals().items()) if n.startswith("case_")]
    for name, fn in cases:
        got, want = fn()
        ok = got == want
        failed += not ok
        print("%s %s: flagged %s" % ("ok  " if ok else "FAIL", name[5:], sorted(got) or "nothing"))
    for line in BAD_LINES:
        try:
            grammar.parse_reply(line)
            print("FAIL grammar: accepted reply %r" % line)
            failed += 1
        except grammar.Bad:
            pass
    for line in BAD_EVENTS:
        try:
            grammar.parse_event(line)
            print("FAIL grammar: accepted event %r" % line)
            failed += 1
        except grammar.Bad:
            pass
    print("checker self-test: %d case(s), %d failed" % (len(cases) + len(BAD_LINES) + len(BAD_EVENTS), failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""test_checker.py - the history checker on small made-up histories: each check must find
the violation planted for it, and must not find one where the history is correct.
Runs in a second; part of `make check-faults`."""

import json
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checker  # noqa: E402

MS = 1_000_000
META = dict(scenario="t", seed=1, fencing="fenced", ttl_ms=2000, heartbeat_ms=666, lock_lease_ms=3000,
            lock_delay_ms=0, sem_limit=2)


class History:
    """Builds a run directory: client records, faults, store log and final state."""

    def __init__(self):
        self.recs, self.faults, self.store, self.seq = [], [], [], 0
        self.dump = {}

    def op(self, c, op, name, t_inv, t_done, kind="ok", d=0, g=0, **kw):
        self.seq += 1
        i = "%s.%d.%d" % (c, g, self.seq)
        inv = dict(c=c, g=g, d=d, k="inv", id=i, op=op, n=name, t=t_inv * MS)
        inv.update({k: v for k, v in kw.items() if k in ("tok", "base")})
        self.recs.append(inv)
        if t_done is not None:
            done = dict(c=c, g=g, d=d, k=kind, id=i, t=t_done * MS)
            if "tok" in kw and op in ("lock", "acquire"):
                done["tok"] = kw["tok"]
                done["rep"] = "OK token=%d count=1" % kw["tok"]
            self.recs.append(done)
        return i

    def hold(self, c, name, tok, t_inv, t_ok, t_unlock, op="lock", **kw):
        self.op(c, op, name, t_inv, t_ok, tok=tok, **kw)
        if t_unlock is not None:
            self.op(c, "unlock" if op == "lock" else "release", name, t_unlock, t_unlock + 1, **kw)

    def ev(self, c, e, t, g=0, d=0, **kw):
        r = dict(c=c, g=g, d=d, k="ev", e=e, t=t * MS)
        r.update(kw)
        self.recs.append(r)

    def fault(self, kind, scope, t0, t1, **kw):
        f = dict(kind=kind, scope=scope, t0=t0 * MS, t1=t1 * MS)
        f.update(kw)
        self.faults.append(f)

    def check(self):
        d = tempfile.mkdtemp(prefix="checker-test.")
        try:
            os.makedirs(os.path.join(d, "hist"))
            with open(os.path.join(d, "meta.json"), "w") as f:
                json.dump(META, f)
            for name, rows in (("hist/all.jsonl", self.recs), ("nemesis.jsonl", self.faults),
                               ("store.jsonl", self.store)):
                with open(os.path.join(d, name), "w") as f:
                    for r in rows:
                        f.write(json.dumps(r) + "\n")
            with open(os.path.join(d, "store-dump.json"), "w") as f:
                json.dump(self.dump, f)
            return checker.check(d)
        finally:
            shutil.rmtree(d)


class CheckerTest(unittest.TestCase):
    def test_clean_handover(self):
        h = History()
        h.hold("a", "k", 10, 0, 5, 100)
        h.hold("b", "k", 11, 50, 102, 200)
        r = h.check()
        self.assertEqual(r["overlap_violations"], 0)
        self.assertEqual(r["token_regressions"], 0)
        self.assertEqual(r["overlaps_seen"], 0)

    def test_overlap_while_holder_alive(self):
        h = History()
        h.hold("a", "k", 10, 0, 5, 100)
        h.hold("b", "k", 11, 50, 60, 200)  # granted before a unlocked, a never disturbed
        self.assertEqual(h.check()["overlap_violations"], 1)

    def test_pause_excuses_overlap_but_is_seen(self):
        h = History()
        h.hold("a", "k", 10, 0, 5, 5000)
        h.fault("pause", "client", 100, 4000, client="a", gen=0)
        h.hold("b", "k", 11, 50, 2200, 2300)
        r = h.check()
        self.assertEqual(r["overlap_violations"], 0)
        self.assertEqual(r["overlaps_seen"], 1)

    def test_kill_of_other_client_excuses_nothing(self):
        h = History()
        h.hold("a", "k", 10, 0, 5, 5000)
        h.fault("pause", "client", 100, 4000, client="c", gen=0)
        h.hold("b", "k", 11, 50, 2200, 2300)
        self.assertEqual(h.check()["overlap_violations"], 1)

    def test_jeopardy_then_lost_ends_the_hold(self):
        h = History()
        h.hold("a", "k", 10, 0, 5, 5000)
        h.fault("kill-redis", "warned", 100, 600)
        h.ev("a", "JEOPARDY", 101)
        h.hold("b", "k", 11, 50, 700, 800, d=1)
        h.ev("a", "LOST", 900, n="k", tok=10, why="backend")
        h.ev("a", "SAFE", 901)
        self.assertEqual(h.check()["overlap_violations"], 0)

    def test_jeopardy_then_safe_without_lost_keeps_the_hold(self):
        h = History()
        h.hold("a", "k", 10, 0, 5, 5000)
        h.fault("kill-redis", "warned", 100, 600)
        h.ev("a", "JEOPARDY", 101)
        h.hold("b", "k", 11, 50, 700, 800, d=1)
        h.ev("a", "SAFE", 901)  # dlockd says a's hold was renewed: b's grant overlapped it
        self.assertEqual(h.check()["overlap_violations"], 1)

    def test_grant_after_jeopardy_then_safe(self):
        # the late-grant bug: a grant answered after the outage, then SAFE, while b holds
        h = History()
        h.hold("b", "k", 20, 0, 3000, 4000, d=0)
        h.ev("a", "JEOPARDY", 1000, d=1)
        h.hold("a", "k", 15, 0, 3500, 3700, d=1)
        h.ev("a", "SAFE", 3501, d=1)
        r = h.check()
        self.assertEqual(r["overlap_violations"], 1)

    def test_token_regression_and_duplicate(self):
        h = History()
        h.hold("a", "k", 10, 0, 5, 100)
        h.hold("b", "k", 9, 150, 160, 200)  # invoked after a's grant, smaller token
        h.hold("c", "k", 9, 250, 260, 300)  # the same token again
        r = h.check()
        self.assertGreaterEqual(r["token_regressions"], 2)

    def test_concurrent_invocations_any_order(self):
        h = History()
        h.hold("a", "k", 11, 0, 5, 100)
        h.hold("b", "k", 10, 1, 150, 200)  # invoked before a's grant: either order is fine
        self.assertEqual(h.check()["token_regressions"], 0)

    def test_semaphore_limit(self):
        h = History()
        for c, tok in (("a", 1), ("b", 2), ("c", 3)):
            h.hold(c, "s", tok, 0, 10 + tok, 100, op="acquire")
        r = h.check()
        self.assertEqual(r["sem_limit_violations"], 1)

    def test_store_stale_and_lost(self):
        h = History()
        ia = h.op("a", "write", "k", 0, 1, tok=10, base=0)
        ib = h.op("b", "write", "k", 2, 3, tok=11, base=1)
        ic = h.op("a", "write", "k", 4, 5, tok=10, base=1)  # stale, accepted, overwrites b
        h.store = [dict(op="write", key="k", tok=10, base=0, wid=ia, ok=True, t=1),
                   dict(op="write", key="k", tok=11, base=1, wid=ib, ok=True, t=3),
                   dict(op="write", key="k", tok=10, base=1, wid=ic, ok=True, t=5)]
        h.dump = {"k": {"cur": 3, "highest": 11, "versions": [[-1, None, 0], [0, ia, 10], [1, ib, 11], [1, ic, 10]]}}
        r = h.check()
        self.assertEqual(r["stale_writes_accepted"], 1)
        self.assertEqual(r["lost_acknowledged"], 1)
        self.assertTrue(checker.verdict(r))
        self.assertFalse(checker.verdict(dict(r, overlap_violations=0, sem_limit_violations=0,
                                              token_regressions=0), control=True))

    def test_store_reads_count(self):
        h = History()
        ia = h.op("a", "write", "k", 4, 5, tok=10, base=0)
        h.store = [dict(op="read", key="k", tok=11, ok=True, t=1),
                   dict(op="write", key="k", tok=10, base=0, wid=ia, ok=True, t=5)]
        h.dump = {"k": {"cur": 1, "highest": 11, "versions": [[-1, None, 0], [0, ia, 10]]}}
        self.assertEqual(h.check()["stale_writes_accepted"], 1)

    def test_release_time(self):
        h = History()
        h.hold("a", "k", 10, 0, 5, None)
        h.op("b", "lock", "k", 50, 2600, tok=11)
        h.fault("kill-client", "client", 100, 400, client="a", gen=0)
        r = h.check()
        self.assertEqual(r["release_samples"], 1)
        self.assertAlmostEqual(r["release_ms"]["max"], 2500)
        self.assertEqual(r["overlap_violations"], 0)


if __name__ == "__main__":
    unittest.main()

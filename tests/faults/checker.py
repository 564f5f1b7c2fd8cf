#!/usr/bin/env python3
"""checker.py - checks the history of one fault-injection run.

    checker.py RUN-DIR            prints the figures as JSON (exit 1 when a must-be-zero is not)

Input (written by faults.py and its processes into RUN-DIR):
  hist/*.jsonl    client records: {"k":"inv","id","op","n",...} then {"k":"ok"|"fail"|"info","id",...}
                  (info: outcome unknown, the connection broke), and events {"k":"ev","e":...};
                  every record has "c" (client), "g" (incarnation), "d" (dlockd index), "t" (ns)
  store.jsonl     every request the fenced store handled, in its order
  store-dump.json the store's final state (every version of every key)
  nemesis.jsonl   every fault: {"kind","scope","t0","t1","client"?,"daemon"?}
  meta.json       ttl, heartbeat, lock-delay, lock-lease, semaphore limit, ...

A *hold* starts when its holder reads the grant (OK token=..). It ends, as the holder sees
it ("believed"), at the first of: its UNLOCK/RELEASE is sent; a LOST for it, BYE, or the
connection breaking is read; the process ends. Its *safe* interval, the part during which
dlockd promises nobody else holds it, ends earlier at:
  - a JEOPARDY read, unless a SAFE follows without a LOST for this hold (renewed: then the
    hold was never at risk and stays safe),
  - the start of a fault that takes the holder out (pause, kill, partition from its dlockd:
    scope "client") or kills its dlockd (scope "daemon") - dlockd cannot tell a paused
    holder from a dead one, so those holds end when the fault begins;
  - event times are moved back by --slack ms (default 100): a live holder stamps an event a
    little after dlockd sent it.
A grant read between a JEOPARDY and the next SAFE is safe only once that SAFE comes with no
LOST for it before (PROTOCOL.md section 6: SAFE means every hold was renewed); if LOST comes
first its safe interval is empty (counted as grants_in_jeopardy_lost).
Faults of scope "warned" (Redis killed, paused or cut off from a dlockd) do not end holds:
the holder must have been told (JEOPARDY/LOST) before anyone else was granted.
Checks (must be 0):
  overlap_violations        two safe intervals of one exclusive lock intersect
  sem_limit_violations      more safe intervals of a semaphore than its limit at once
  token_regressions         a grant B invoked after grant A completed has token <= A's
                            (per name, locks and semaphores), or two holds share a token
  stale_writes_accepted     the store accepted a write with a token lower than one it had
                            already accepted (read or write) for that key
  lost_acknowledged         a write the client got OK for is not in the key's final value
Reported:
  overlaps_seen             grants made while another client still believed it held the lock
                            (expected > 0 under pauses and partitions: what fencing is for)
  stale_writes_rejected, release_ms (dead holder: from the fault to the next grant of a lock
  the victim held, when someone was waiting), daemon_release_ms, jeopardy_lag_ms.
"""

import argparse
import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import percentile, read_jsonl  # noqa: E402

INF = float("inf")
MS = 1_000_000


class Hold:
    __slots__ = ("c", "g", "d", "name", "kind", "tok", "inv", "start", "believed", "safe", "why", "opid",
                 "in_jeopardy")

    def __init__(self, **kw):
        for k in self.__slots__:
            setattr(self, k, kw.get(k))

    def __repr__(self):
        def ms(x):
            return "inf" if x == INF else "%.1f" % (x / MS)
        return "%s/%d %s tok=%s [%s,%s) safe<%s (%s)" % (self.c, self.g, self.name, self.tok, ms(self.start),
                                                         ms(self.believed), ms(self.safe), self.why)


def load(run):
    recs = []
    for p in sorted(glob.glob(os.path.join(run, "hist", "*.jsonl"))):
        recs.extend(read_jsonl(p))
    with open(os.path.join(run, "meta.json")) as f:
        meta = json.load(f)
    faults = read_jsonl(os.path.join(run, "nemesis.jsonl"))
    store_log = read_jsonl(os.path.join(run, "store.jsonl"))
    try:
        with open(os.path.join(run, "store-dump.json")) as f:
            dump = json.load(f)
    except (OSError, ValueError):
        dump = None
    return meta, recs, faults, store_log, dump


def build_holds(recs, faults, slack_ns):
    """Holds of every incarnation, with believed and safe ends."""
    by_inc = {}
    for r in recs:
        by_inc.setdefault((r["c"], r["g"]), []).append(r)
    kills = {}
    for f in faults:
        if f["kind"] == "kill-client":
            kills[(f["client"], f.get("gen", -1))] = f["t0"]
    holds, pending_ops, reentrant = [], [], []
    invs = {}
    for (c, g), rs in by_inc.items():
        rs.sort(key=lambda r: r["t"])
        last_t = rs[-1]["t"]
        end_of_life = kills.get((c, g), last_t)
        for r in rs:
            if r["k"] == "inv":
                invs[r["id"]] = r
        done = {}
        for r in rs:
            if r["k"] in ("ok", "fail", "info"):
                done[r["id"]] = r
        in_jeopardy = False  # JEOPARDY read on this connection and no SAFE since
        for i, r in enumerate(rs):
            if r["k"] == "ev":
                if r["e"] == "JEOPARDY":
                    in_jeopardy = True
                elif r["e"] in ("SAFE", "SESSION", "RESUMED"):
                    in_jeopardy = False
            if r["k"] == "inv" and r["op"] in ("lock", "acquire"):
                comp = done.get(r["id"])
                pending_ops.append((r, comp))
            if r["k"] != "ok" or r["id"] not in invs:
                continue
            inv = invs[r["id"]]
            if inv["op"] not in ("lock", "acquire") or "tok" not in r:
                continue
            if inv["op"] == "lock" and (r.get("rep") or "").find(" count=1") < 0:
                reentrant.append(r)  # re-entered a hold the client did not know it still had
                continue
            h = Hold(c=c, g=g, d=r.get("d", 0), name=inv["n"], kind="sem" if inv["op"] == "acquire" else "lock",
                     tok=r["tok"], inv=inv["t"], start=r["t"], believed=INF, safe=INF, why="run end", opid=r["id"],
                     in_jeopardy=in_jeopardy)
            # granted while in jeopardy: it counts only once a SAFE follows without a LOST for it
            jeopardy = r["t"] if in_jeopardy else None
            for x in rs[i + 1:]:
                t = x["t"]
                if x["k"] == "inv" and x["op"] in ("unlock", "release") and x["n"] == h.name:
                    h.believed, h.safe, h.why = t, (jeopardy if jeopardy is not None else t), x["op"]
                    break
                if x["k"] != "ev":
                    continue
                e = x["e"]
                if e == "JEOPARDY":
                    if jeopardy is None:
                        jeopardy = t - slack_ns
                elif e == "SAFE":
                    jeopardy = None
                elif (e == "LOST" and x.get("n") == h.name and x.get("tok", h.tok) == h.tok) or \
                        e in ("BYE", "EOF", "NOREPLY", "EXIT"):
                    h.believed = t
                    h.safe = jeopardy if jeopardy is not None else t - slack_ns
                    h.why = e if e != "LOST" else "LOST " + str(x.get("why"))
                    break
            if h.believed == INF:
                # the incarnation ended without a word: killed (or the run ended)
                h.believed = h.safe = max(end_of_life, h.start)
                h.why = "killed" if (c, g) in kills else "run end"
            if h.safe < h.start:
                h.safe = h.start
            holds.append(h)
    # faults that take a holder out end its safe interval when they begin
    for f in faults:
        for h in holds:
            if f["scope"] == "client" and f.get("client") != h.c:
                continue
            if f["scope"] == "daemon" and f.get("daemon") != h.d:
                continue
            if f["scope"] not in ("client", "daemon"):
                continue
            if h.inv <= f["t1"] and h.safe > f["t0"]:
                cut = max(f["t0"], h.inv)
                if cut < h.safe:
                    h.safe = max(cut, h.start)
                    h.why += " / fault " + f["kind"]
    return holds, pending_ops, reentrant


def intersections(ivals):
    """Pairs of intersecting intervals [(s, e, hold)]: for each interval, the ones that start
    before it and are still open when it starts."""
    out = []
    ivals = sorted((iv for iv in ivals if iv[1] > iv[0]), key=lambda iv: iv[0])
    active = []
    for s, e, h in ivals:
        active = [a for a in active if a[1] > s]
        for a in active:
            if (a[2].c, a[2].g, a[2].opid) != (h.c, h.g, h.opid):
                out.append((a[2], h))
        active.append((s, e, h))
    return out


def max_concurrency(ivals, limit):
    """Times a new interval started while `limit` others were open."""
    ivals = sorted((iv for iv in ivals if iv[1] > iv[0]), key=lambda iv: iv[0])
    bad, active = [], []
    for s, e, h in ivals:
        active = [a for a in active if a[1] > s]
        if len(active) >= limit:
            bad.append((h, [a[2] for a in active]))
        active.append((s, e, h))
    return bad


def token_regressions(holds):
    out = []
    by_name = {}
    for h in holds:
        by_name.setdefault(h.name, []).append(h)
    for name, hs in by_name.items():
        seen = {}
        for h in hs:
            if h.tok in seen:
                out.append(("duplicate", seen[h.tok], h))
            seen[h.tok] = h
        by_start = sorted(hs, key=lambda h: h.start)
        j, best = 0, None
        for h in sorted(hs, key=lambda h: h.inv):
            while j < len(by_start) and by_start[j].start < h.inv:
                if best is None or by_start[j].tok > best.tok:
                    best = by_start[j]
                j += 1
            if best is not None and h.tok <= best.tok and best is not h:
                out.append(("regression", best, h))
    return out


def check_store(store_log, dump, recs):
    res = dict(store_reads=0, store_writes=0, stale_writes_rejected=0, stale_reads_rejected=0,
               stale_writes_accepted=0, lost_acknowledged=0, overwritten_writes=0, acked_writes=0)
    highest = {}
    examples = []
    for r in store_log:
        key = r.get("key")
        if r["op"] == "read":
            res["store_reads"] += 1
            if r["ok"]:
                highest[key] = max(highest.get(key, 0), r["tok"])
            else:
                res["stale_reads_rejected"] += 1
        elif r["op"] == "write":
            res["store_writes"] += 1
            if not r["ok"]:
                res["stale_writes_rejected"] += 1
                continue
            if r["tok"] < highest.get(key, 0):
                res["stale_writes_accepted"] += 1
                if len(examples) < 5:
                    examples.append("stale write accepted: %s tok=%d < %d" % (r["wid"], r["tok"], highest[key]))
            highest[key] = max(highest.get(key, 0), r["tok"])
    acked = {}
    invs = {r["id"]: r for r in recs if r["k"] == "inv" and r.get("op") == "write"}
    for r in recs:
        if r["k"] == "ok" and r["id"] in invs:
            acked[r["id"]] = invs[r["id"]]["n"]
    res["acked_writes"] = len(acked)
    if dump is None:
        res["lost_acknowledged"] = len(acked)
        examples.append("no final store state")
        return res, examples
    chains, accepted = {}, {}
    for key, st in dump.items():
        vs = st["versions"]
        chain, v = set(), st["cur"]
        while v > 0:
            chain.add(vs[v][1])
            v = vs[v][0]
        chains[key] = chain
        accepted[key] = {x[1] for x in vs[1:]}
    for key in chains:
        res["overwritten_writes"] += len(accepted[key] - chains[key])
    for wid, key in acked.items():
        if wid not in chains.get(key, ()):
            res["lost_acknowledged"] += 1
            if len(examples) < 10:
                examples.append("acknowledged write %s to %s is lost" % (wid, key))
    return res, examples


def check(run, slack_ms=100):
    meta, recs, faults, store_log, dump = load(run)
    slack = slack_ms * MS
    holds, pending_ops, reentrant = build_holds(recs, faults, slack)
    res = dict(scenario=meta.get("scenario"), seed=meta.get("seed"), fencing=meta.get("fencing"))
    res["operations"] = sum(1 for r in recs if r["k"] in ("ok", "fail", "info"))
    res["grants"] = len(holds)
    res["reentrant_grants"] = len(reentrant)
    res["faults_injected"] = len(faults)
    kinds = {}
    for f in faults:
        kinds[f["kind"]] = kinds.get(f["kind"], 0) + 1
    res["fault_kinds"] = kinds
    details = []

    sem_limit = meta.get("sem_limit", 1)
    locks = [h for h in holds if h.kind == "lock"]
    sems = [h for h in holds if h.kind == "sem"]
    viol, seen = [], []
    for name in sorted({h.name for h in locks}):
        hs = [h for h in locks if h.name == name]
        viol += intersections([(h.start, h.safe, h) for h in hs])
        seen += intersections([(h.start, h.believed, h) for h in hs])
    # grants read between JEOPARDY and SAFE that were lost before SAFE: within the contract, but
    # reported, with how many of them another client's safe hold overlapped
    jg = [h for h in holds if h.in_jeopardy]
    jlost = [h for h in jg if h.safe <= h.start]
    res["grants_in_jeopardy"] = len(jg)
    res["grants_in_jeopardy_lost"] = len(jlost)
    jover = 0
    for h in jlost:
        if h.kind == "lock" and any(o is not h and o.name == h.name and o.start < h.believed and h.start < o.safe and
                                    o.safe > o.start for o in locks):
            jover += 1
            if jover <= 3:
                details.append("granted in jeopardy, overlapped by a safe hold, then lost: %r" % h)
    res["jeopardy_grant_overlaps"] = jover
    res["overlap_violations"] = len(viol)
    res["overlaps_seen"] = len({(b.c, b.g, b.opid) for _, b in seen})
    for a, b in viol[:10]:
        details.append("overlap: %r  and  %r" % (a, b))
    semv, sems_seen = [], []
    for name in sorted({h.name for h in sems}):
        hs = [h for h in sems if h.name == name]
        semv += max_concurrency([(h.start, h.safe, h) for h in hs], sem_limit)
        sems_seen += max_concurrency([(h.start, h.believed, h) for h in hs], sem_limit)
    res["sem_limit_violations"] = len(semv)
    res["sem_over_limit_seen"] = len(sems_seen)
    for h, others in semv[:5]:
        details.append("semaphore over limit: %r while %r" % (h, others))

    regs = token_regressions(holds)
    res["token_regressions"] = len(regs)
    for kind, a, b in regs[:10]:
        details.append("token %s: %r then %r" % (kind, a, b))

    sres, sex = check_store(store_log, dump, recs)
    res.update(sres)
    details += sex

    # dead-holder release: from the fault to the next grant of a lock the victim held
    def releases(scope):
        out = []
        for f in faults:
            if f["scope"] != scope or f["kind"] in ("latency",):
                continue
            t0 = f["t0"]
            if scope == "client":
                victims = [h for h in locks if h.c == f["client"] and h.start <= t0 <= h.believed]
            else:
                victims = [h for h in locks if h.d == f["daemon"] and h.start <= t0 <= h.believed]
            for v in victims:
                # someone must have been waiting, and still be: not a wait that died with the
                # fault (on the killed daemon, or its connection broke)
                waiting = [inv for inv, comp in pending_ops
                           if inv["n"] == v.name and inv["op"] == "lock" and inv["t"] < t0 and
                           (inv["c"], inv["g"]) != (v.c, v.g) and (comp is None or comp["t"] > t0) and
                           not (scope == "daemon" and inv.get("d") == f["daemon"]) and
                           not (comp is not None and comp["k"] == "info")]
                if not waiting:
                    continue
                nxt = [h.start for h in locks if h.name == v.name and h.start > t0 and h is not v]
                if not nxt:
                    continue
                # another fault that began before the next grant may be what delayed it
                if any(g is not f and t0 < g["t0"] < min(nxt) for g in faults):
                    continue
                out.append((min(nxt) - t0) / MS)
        return out

    rel = releases("client")
    bound = meta["ttl_ms"] + meta["heartbeat_ms"] + meta.get("lock_delay_ms", 0) + 100
    res["release_samples"] = len(rel)
    res["release_ms"] = dict(p50=percentile(rel, 50), p99=percentile(rel, 99), max=max(rel) if rel else None,
                             bound=bound)
    res["release_over_bound"] = sum(1 for x in rel if x > bound)
    drel = releases("daemon")
    dbound = meta["lock_lease_ms"] + 100
    res["daemon_release_samples"] = len(drel)
    res["daemon_release_ms"] = dict(p50=percentile(drel, 50), p99=percentile(drel, 99),
                                    max=max(drel) if drel else None, bound=dbound)
    res["daemon_release_over_bound"] = sum(1 for x in drel if x > dbound)

    # how long after a Redis-side fault began did holders read JEOPARDY (or lose the connection)
    lags = []
    evs = sorted((r for r in recs if r["k"] == "ev"), key=lambda r: r["t"])
    for f in faults:
        if f["scope"] != "warned":
            continue
        for h in holds:
            if not (h.start <= f["t0"] < h.believed):
                continue
            if f.get("daemon") is not None and h.d != f["daemon"]:
                continue
            for e in evs:
                if e["c"] == h.c and e["g"] == h.g and e["t"] >= f["t0"] and \
                        e["e"] in ("JEOPARDY", "LOST", "EOF", "BYE"):
                    lags.append((e["t"] - f["t0"]) / MS)
                    break
    res["jeopardy_lag_ms"] = dict(n=len(lags), p50=percentile(lags, 50), max=max(lags) if lags else None)
    res["details"] = details
    return res


MUST_BE_ZERO = ("overlap_violations", "sem_limit_violations", "token_regressions", "stale_writes_accepted",
                "lost_acknowledged")


def verdict(res, control=False):
    """List of failure strings (empty: the run passes)."""
    bad = []
    if control:
        # fencing off: the run must be able to fail
        if res["lost_acknowledged"] == 0:
            bad.append("control run shows no lost acknowledged write: the test cannot see lost updates")
        if res["stale_writes_accepted"] == 0:
            bad.append("control run shows no stale write accepted")
        for k in ("overlap_violations", "sem_limit_violations", "token_regressions"):
            if res[k]:
                bad.append("%s = %d" % (k, res[k]))
        return bad
    for k in MUST_BE_ZERO:
        if res[k]:
            bad.append("%s = %d (must be 0)" % (k, res[k]))
    if res["release_over_bound"]:
        bad.append("%d dead-holder releases over the bound %d ms (max %.0f)" % (
            res["release_over_bound"], res["release_ms"]["bound"], res["release_ms"]["max"]))
    if res["daemon_release_over_bound"]:
        bad.append("%d dead-daemon releases over the bound %d ms (max %.0f)" % (
            res["daemon_release_over_bound"], res["daemon_release_ms"]["bound"], res["daemon_release_ms"]["max"]))
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("--slack", type=int, default=100)
    ap.add_argument("--control", action="store_true")
    a = ap.parse_args()
    res = check(a.run, a.slack)
    print(json.dumps(res, indent=1))
    bad = verdict(res, a.control)
    for b in bad:
        print("FAIL:", b, file=sys.stderr)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

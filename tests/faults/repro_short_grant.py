#!/usr/bin/env python3
"""repro_short_grant.py - reproducer: dlockd answers OK for a hold whose lease is about to run
out, and does not renew it in time; another client is granted the lock when it lapses, with
no LOST to the first before that.

    repro_short_grant.py       exit 0: dlockd behaved; 1: the bug showed; 2: setup failed

Found by faults.py (scenarios "partition-redis" and "latency"). Two dlockd on one Redis, B's
links to Redis through proxy.py, lock-lease 3s. X (on A) holds k; Y (on B) waits
(LOCK k wait=20s), its queue entry ending at E (3 s); both of B's links stall; B's links come
back at E - 300 ms; Y reads * SAFE, then OK token=T1; Z (on A) asks LOCK k wait=2s. Y is
queued half-way between two of B's renewals (read from B's debug log), so none falls in the
last 300 ms. Two variants, both run unless REPRO_VARIANT names one:
  inherit  X unlocks at E - 1 s. Until c27644b, grant_waiter() in daemon/scripts/common.lua
           gave the hold the rest of the queue entry's lease (ZSCORE x '@'..wid), 1 s, so it
           lapsed at E, 300 ms after Y's OK, and Z got k. Passes since c27644b (full lease);
           since a497fdc the hold takes over the entry's lease again (so a dead daemon's
           waiter blocks nobody longer than its entry would), the grant says how much is
           left, and B checks a grant with less than half a lock-lease left, which starts
           its lease again, before it answers OK.
  late     X unlocks at once, while B is stalled: the grant is made about 2.7 s before B
           can answer it, with a full lease that ends at E. B checks that the hold exists
           (5024c07) and answers OK, but neither that check nor anything else extends it
           before B's next renewal: it lapses at E and Z gets k while Y was last told OK.
           Expected: a grant answered after a delay is renewed (given a full lease from the
           answer) before or when it is answered. Passes since 5c2d9ef (cancel.lua starts
           the lease of the grant it confirms again).
  pubsub   (not run by default) only B's script link stalls and X unlocks at E - 250 ms: the
           grant comes by pub/sub while B is in jeopardy. Passes since 5024c07.
"""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import kv, redis_cmd  # noqa: E402
from rig import Rig  # noqa: E402


def main():
    variants = [os.environ["REPRO_VARIANT"]] if os.environ.get("REPRO_VARIANT") else ["inherit", "late"]
    status = 0
    for v in variants:
        print("== variant %s" % v)
        st = run(v)
        if st == 2:
            return 2
        status = max(status, st)
    return status


def drain(c, secs):
    """Lines c reads within secs (at least one look), stamped when read."""
    out, end = [], time.monotonic() + secs
    while True:
        line = c.readline(min(0.01, max(0.001, end - time.monotonic())))
        if line is not None:
            if not line.startswith("#p"):
                out.append((time.monotonic(), line))
            continue
        if time.monotonic() >= end:
            return out

def renew_phase(log):
    """Wall-clock ms (mod 1000) of B's periodic renewals, from its debug log; None if unknown."""
    import datetime
    for _ in range(40):
        stamps = []
        with open(log, errors="replace") as f:
            for line in f:
                if " debug renew: " in line:
                    t = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S.%f")
                    stamps.append(t.replace(tzinfo=datetime.timezone.utc).timestamp() * 1000)
        if len(stamps) >= 2:
            return stamps[-1] % 1000
        time.sleep(0.1)
    return None


def run(variant):
    return Rig(session_ttl="20s").run(lambda rig: body(rig, variant))


def body(rig, variant):
    x, y, z = rig.client("A", "X"), rig.client("B", "Y"), rig.client("A", "Z")
    t_x = kv(x.request("LOCK k"), "token")
    # B renews every lock-lease/3 = 1 s from its start: queue Y half-way between two
    # renewals, so that none falls in the last 300 ms of Y's queue entry (see below)
    phase = renew_phase(rig.log("B.log"))
    if phase is not None:
        now = time.time() * 1000
        time.sleep(((phase + 500 - now) % 1000) / 1000.0)
    y.send("LOCK k wait=20s")
    entry = None
    for _ in range(200):
        xs = redis_cmd(rig.rport, "ZRANGE", "dlock:{k}:x", 0, -1, "WITHSCORES")
        entry = [(xs[i], int(xs[i + 1])) for i in range(0, len(xs), 2) if xs[i].startswith("@")]
        if entry:
            break
        time.sleep(0.005)
    if variant == "pubsub":
        rig.ctl("STALL #1")  # B's script connection (opened first); its pub/sub one still flows
    else:
        rig.ctl("STALL")
    if not entry:
        print("setup: Y's queue entry not found")
        return 2
    sec, usec = redis_cmd(rig.rport, "TIME")
    left_ms = entry[0][1] - (int(sec) * 1000 + int(usec) // 1000)
    t_end = time.monotonic() + left_ms / 1000.0
    print("1. X holds k (token %s); Y queued, entry %s ends in %d ms; B's link%s stall%s" % (
        t_x, entry[0][0], left_ms, "" if variant == "pubsub" else "s", "s" if variant == "pubsub" else ""))
    if variant == "pubsub":
        drain(y, max(0.0, t_end - 0.25 - time.monotonic()))
        print("2. X unlocks 250 ms before the entry's end:", x.request("UNLOCK k"))
    else:
        if variant == "inherit":
            drain(y, max(0.0, t_end - 1.0 - time.monotonic()))
            print("2. X unlocks 1 s before the entry's end:", x.request("UNLOCK k"))
        else:
            print("2. X unlocks:", x.request("UNLOCK k"))
        drain(y, max(0.0, t_end - 0.3 - time.monotonic()))
        rig.ctl("HEAL")
        print("3. B's links come back 300 ms before the entry's end")
    t_unlock = time.monotonic()
    z.send("LOCK k wait=2s")
    y_after = drain(y, 0.0)
    rep_z, t_z = None, None
    end = time.monotonic() + 3
    while time.monotonic() < end and rep_z is None:
        rep_z = z.readline(0.005)
        y_after += drain(y, 0.0)
    t_z = time.monotonic()
    y_after += drain(y, 0.3)
    print("4. Z:", rep_z, "%.0f ms later" % ((t_z - t_unlock) * 1000))
    for t, ln in y_after:
        print("   Y read %+.0f ms: %s" % ((t - t_unlock) * 1000, ln))
    rig.ctl("HEAL")
    later = drain(y, 1.5)
    print("5. then Y read:", [ln for _, ln in later])
    y_ok = [(t, ln) for t, ln in y_after if ln.startswith("OK token=")]
    warned = [(t, ln) for t, ln in y_after if ln.startswith("* LOST") or ln.startswith("* BYE")]
    lost_fast = [(t, ln) for t, ln in warned if y_ok and t - y_ok[0][0] < 1.0]
    if rep_z and rep_z.startswith("OK") and y_ok and y_ok[0][0] < t_z and (not warned or warned[0][0] > t_z):
        print("BUG: Y was answered %r; %.0f ms later Z was granted k (%s) while Y had heard nothing more" % (
            y_ok[0][1], (t_z - y_ok[0][0]) * 1000, rep_z))
        status = 1
    elif variant != "pubsub" and rep_z and rep_z.startswith("OK") and lost_fast:
        print("BUG: Y was answered %r with Redis reachable, lost it %.0f ms later (%s) and Z was granted k" % (
            y_ok[0][1], (lost_fast[0][0] - y_ok[0][0]) * 1000, lost_fast[0][1]))
        status = 1
    elif not y_ok:
        print("ok: Y was not answered OK for a hold about to lapse")
        status = 0
    else:
        print("ok: Z was not granted k while Y held it")
        status = 0
    return status


if __name__ == "__main__":
    sys.exit(main())

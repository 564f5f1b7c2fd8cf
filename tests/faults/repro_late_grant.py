#!/usr/bin/env python3
"""repro_late_grant.py - reproducer: a grant that reaches dlockd after its lease ran out in
Redis is still answered OK, while another client holds the lock.

    repro_late_grant.py        exit 0: dlockd behaved; 1: the bug showed; 2: setup failed

Found by faults.py (scenario "latency", nemesis stall-redis). Steps, with two dlockd on one
Redis, B reaching Redis through the userspace proxy (proxy.py), lock-lease 3s:
  1. X (on A) holds k.  Y (on B) waits for k (LOCK k wait=20s) and is queued in Redis.
  2. B's link to Redis stalls (packets delayed, as in a partition that drops them).
  3. X unlocks: A's unlock script grants k to Y's queue entry in Redis (lease 3s) and
     publishes "G <wid> <token> ..." on B's channel; B does not get it yet.
  4. B cannot renew; Y gets * JEOPARDY. Y's hold expires in Redis after lock-lease.
  5. Z (on A) locks k and gets it, with a newer token.
  6. The stall ends. B reads the old grant message and answers Y "OK token=<old>" and then
     "* SAFE" - while Z holds k. Y was told it holds the lock, and that all is well.
Expected by the contract (PROTOCOL.md sections 4, 6, 9): Y is not answered OK for a hold
that no longer exists in Redis (it is queued again, or gets TIMEOUT/ERR BACKEND), and a hold
that could not be renewed is reported LOST before SAFE.
"""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import kv  # noqa: E402
from rig import Rig, read_lines  # noqa: E402


def body(rig):
    x, y, z = rig.client("A", "X"), rig.client("B", "Y"), rig.client("A", "Z")
    t_x = int(kv(x.request("LOCK k"), "token"))
    y.send("LOCK k wait=20s")
    st = None
    for _ in range(100):  # until Y is queued
        st = x.request("STATUS k")
        if '"waiters":1' in st:
            break
        time.sleep(0.02)
    print("1. X holds k (token %d); Y waits: %s" % (t_x, st))
    rig.ctl("STALL")
    print("2. B's link to Redis stalls")
    print("3. X unlocks:", x.request("UNLOCK k"))
    y_lines = read_lines(y, 4.5, ping_every=0.5)  # lock-lease 3s + margin; Y's session lives
    print("4. Y read while B was stalled:", y_lines)
    rep_z = z.request("LOCK k wait=5s")
    t_z = kv(rep_z, "token")
    print("5. Z:", rep_z)
    if t_z is None:
        print("setup: Z did not get k; cannot show the bug")
        return 2
    rig.ctl("HEAL")
    print("6. stall over")
    after = read_lines(y, 2.0)
    print("   Y then read:", after)
    status_k = x.request("STATUS k")
    print("   STATUS k:", status_k)
    granted = [ln for ln in after if ln.startswith("OK token=")]
    safe_idx = [i for i, ln in enumerate(after) if ln == "* SAFE"]
    lost_before_safe = any(ln.startswith("* LOST k") for ln in after[:safe_idx[0]]) if safe_idx else False
    bad = []
    if granted:
        t_y = int(kv(granted[0], "token"))
        bad.append("Y was answered %r while Z holds k with token %s (newer: %s)" % (
            granted[0], t_z, int(t_z) > t_y))
        if safe_idx and not lost_before_safe and after.index(granted[0]) < safe_idx[0]:
            bad.append("then * SAFE without * LOST k before it")
    if bad:
        print("BUG: " + "; ".join(bad))
        status = 1
    else:
        print("ok: no grant of an expired hold")
        status = 0
    return status


def main():
    return Rig(session_ttl="10s").run(body)


if __name__ == "__main__":
    sys.exit(main())

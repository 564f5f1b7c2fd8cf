#!/usr/bin/env python3
"""repro_late_grant_requeued.py - reproducer: a grant published for an earlier submission of
a wait reaches dlockd after the wait was queued again, and is answered OK with the old token
while another client holds the lock.

    repro_late_grant_requeued.py   exit 0: dlockd behaved; 1: the bug showed; 2: setup failed

Found by faults.py (scenario "partition-redis", nftables drop, after 5024c07 "Check grants
that may have lapsed before answering them"). After a partition heals, the pub/sub link can
deliver its backlog later than the script link (TCP retransmission backoff). Steps, with two
dlockd on one Redis and B's two Redis connections through proxy.py (#1 scripts, #2 pub/sub):
  1. X (on A) holds k. Y (on B) waits (LOCK k wait=20s), queued as wait W.
  2. Both of B's links stall. X unlocks: k is granted to W, "G W <T1> ..." is published to B.
  3. The grant lapses unrenewed (lock-lease 3s); Z (on A) gets k with token T2 > T1.
  4. B's script link comes back: its renewal finds W's queue entry gone, the check finds no
     hold, W is queued again (same wid), behind Z; B sends * SAFE.
  5. B's pub/sub link comes back and delivers the old "G W <T1>". The wait was last submitted
     after the link's trouble, so the grant is answered directly: Y reads "OK token=T1"
     while Z holds k with T2.
Expected: a grant is answered only for the submission it was made for (or after checking
the hold in Redis); Y keeps waiting behind Z.
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
    for _ in range(100):  # until Y is queued
        if '"waiters":1' in x.request("STATUS k"):
            break
        time.sleep(0.02)
    rig.ctl("STALL #1")
    rig.ctl("STALL #2")
    print("1. X holds k (token %d); Y is queued; both of B's links stall" % t_x)
    print("2. X unlocks:", x.request("UNLOCK k"))
    y_lines = read_lines(y, 3.5, ping_every=0.5)  # the grant to Y lapses (lock-lease 3s)
    rep_z = z.request("LOCK k wait=5s", 6.0)
    t_z = kv(rep_z, "token")
    print("3. Y read:", y_lines, "; Z:", rep_z)
    if t_z is None:
        print("setup: Z did not get k")
        return 2
    rig.ctl("HEAL #1")
    after1 = read_lines(y, 2.5, ping_every=0.3)  # B renews, finds the entry gone, queues Y again
    st = x.request("STATUS k")
    print("4. B's script link back; Y read:", after1, "; STATUS k:", st)
    rig.ctl("HEAL #2")
    after2 = read_lines(y, 1.5)
    print("5. B's pub/sub link back; Y read:", after2)
    print("   STATUS k:", x.request("STATUS k"))
    granted = [ln for ln in after1 + after2 if ln.startswith("OK token=")]
    if granted and int(kv(granted[0], "token")) < int(t_z):
        print("BUG: Y was answered %r while Z holds k with the newer token %s" % (granted[0], t_z))
        status = 1
    else:
        print("ok: Y was not answered with a grant older than Z's")
        status = 0
    return status


def main():
    return Rig(session_ttl="10s").run(body)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""repro_short_grant.py - reproducer: a hold granted to a queued waiter inherits the rest of
the waiter's queue-entry lease, which can be milliseconds, so dlockd answers OK for a hold
that Redis lets lapse right away; another client is granted the lock while the first was
told nothing but OK.

    repro_short_grant.py       exit 0: dlockd behaved; 1: the bug showed; 2: setup failed

Found by faults.py (scenario "partition-redis"). Cause: grant_waiter() in
daemon/scripts/common.lua sets the new hold's expiry to ZSCORE(x, '@'..wid), the end of
the queue entry's lease, not NOW + lease. When the waiter's dlockd could not renew its queue
entries for a while (its script link to Redis slow or cut, its pub/sub link fine), the
grant lives only as long as the entry had left.
Steps (two dlockd on one Redis, B's *script* connection through proxy.py, lock-lease 3s):
  1. X (on A) holds k.  Y (on B) waits: LOCK k wait=20s (queue entry lease 3s).
  2. B's script connection stalls (its pub/sub connection does not): B cannot renew the
     entry; Y gets * JEOPARDY after backend-timeout.
  3. 250 ms before the entry's lease ends, X unlocks: A grants k to Y's entry, with the
     entry's expiry, and publishes the grant; B answers Y "OK token=T1".
  4. Z (on A) asks LOCK k wait=5s: k is granted to Z (token T2 > T1) once Y's hold lapses,
     about 250 ms after Y was told OK. Y hears nothing until B's link comes back (LOST).
Expected: a grant that is answered OK lasts a full lease (or is not answered until B has
renewed it); in any case Z is not granted k while Y was last told OK for it.
Note: Y was in JEOPARDY when its OK came, and it gets LOST before SAFE, so a client that
ignores every grant between JEOPARDY and SAFE is safe; one that trusts OK is not.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import LineConn, free_port, kv, redis_cmd, redis_ping  # noqa: E402


def main():
    dlockd = os.environ.get("DLOCKD", os.path.join(HERE, "..", "..", "daemon", "dlockd"))
    redis = os.environ.get("REDIS_SERVER") or shutil.which("redis-server")
    tmp = tempfile.mkdtemp(prefix="dlockd-repro.")
    procs = []

    def spawn(argv, name):
        f = open(os.path.join(tmp, name), "ab")
        p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        f.close()
        procs.append(p)
        return p

    def wait_for(pred, what):
        for _ in range(200):
            if pred():
                return
            time.sleep(0.05)
        raise RuntimeError("no " + what)

    def ping(port):
        try:
            c = LineConn(("127.0.0.1", port), timeout=0.5)
            ok = c.request("PING", 1.0) == "OK"
            c.close()
            return ok
        except (OSError, EOFError, TimeoutError):
            return False

    def client(port, name):
        c = LineConn(("127.0.0.1", port), timeout=1.0)
        assert c.request("HELLO ttl=20s name=" + name).startswith("OK")
        return c

    def ctl(cmd):
        c = LineConn(("127.0.0.1", cport), timeout=1.0)
        assert c.request(cmd) == "OK"
        c.close()

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

    status = 2
    try:
        rport, pport, cport, aport, bport = (free_port() for _ in range(5))
        spawn([redis, "--port", str(rport), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
               "--dir", tmp], "redis.log")
        wait_for(lambda: redis_ping(rport), "redis")
        spawn([sys.executable, os.path.join(HERE, "proxy.py"), "--listen", "127.0.0.1:%d" % pport,
               "--target", "127.0.0.1:%d" % rport, "--control", "127.0.0.1:%d" % cport], "proxy.out")
        wait_for(lambda: ping(cport), "proxy")
        common = ["--session-ttl", "20s", "--lock-lease", "3s", "--backend-timeout", "1s", "--log-level", "debug"]
        spawn([dlockd, "--listen", "127.0.0.1:%d" % aport, "--redis", "127.0.0.1:%d" % rport] + common, "A.log")
        wait_for(lambda: ping(aport), "dlockd A")
        spawn([dlockd, "--listen", "127.0.0.1:%d" % bport, "--redis", "127.0.0.1:%d" % pport] + common, "B.log")
        wait_for(lambda: ping(bport), "dlockd B")

        x, y, z = client(aport, "X"), client(bport, "Y"), client(aport, "Z")
        t_x = kv(x.request("LOCK k"), "token")
        y.send("LOCK k wait=20s")
        entry = None
        for _ in range(200):
            xs = redis_cmd(rport, "ZRANGE", "dlock:{k}:x", 0, -1, "WITHSCORES")
            entry = [(xs[i], int(xs[i + 1])) for i in range(0, len(xs), 2) if xs[i].startswith("@")]
            if entry:
                break
            time.sleep(0.005)
        ctl("STALL #1")  # B's script connection (opened first); its pub/sub one still flows
        if not entry:
            print("setup: Y's queue entry not found")
            return 2
        sec, usec = redis_cmd(rport, "TIME")
        left_ms = entry[0][1] - (int(sec) * 1000 + int(usec) // 1000)
        print("1. X holds k (token %s); Y queued, entry %s ends in %d ms; B's script link stalls" % (
            t_x, entry[0][0], left_ms))
        y_lines = drain(y, max(0.0, (left_ms - 250) / 1000.0))
        rep_x = x.request("UNLOCK k")
        t_unlock = time.monotonic()
        print("2. Y read while waiting:", [ln for _, ln in y_lines])
        print("3. X unlocks 250 ms before the entry's end:", rep_x)
        heal_after = float(os.environ.get("REPRO_HEAL_AFTER_MS", "-1"))
        if heal_after >= 0:  # let B's script link recover while Y's new hold still exists
            time.sleep(heal_after / 1000.0)
            ctl("HEAL")
        z.send("LOCK k wait=5s")
        y_after = drain(y, 0.0)
        rep_z, t_z = None, None
        end = time.monotonic() + 6
        while time.monotonic() < end and rep_z is None:
            rep_z = z.readline(0.005)
            y_after += drain(y, 0.0)
        t_z = time.monotonic()
        y_after += drain(y, 0.3)
        print("4. Z:", rep_z, "%.0f ms after the unlock" % ((t_z - t_unlock) * 1000))
        for t, ln in y_after:
            print("   Y read %+.0f ms after the unlock: %s" % ((t - t_unlock) * 1000, ln))
        ctl("HEAL")
        later = drain(y, 2.0)
        print("5. B's link back; Y then read:", [ln for _, ln in later])
        y_ok = [(t, ln) for t, ln in y_after if ln.startswith("OK token=")]
        warned = [(t, ln) for t, ln in y_after if ln.startswith("* LOST") or ln.startswith("* BYE")]
        if rep_z and rep_z.startswith("OK") and y_ok and (not warned or warned[0][0] > t_z):
            print("BUG: Y was answered %r; %.0f ms later Z was granted k (%s) while Y had heard nothing more" % (
                y_ok[0][1], (t_z - y_ok[0][0]) * 1000, rep_z))
            status = 1
        elif not y_ok:
            print("ok: Y was not answered OK for a hold about to lapse")
            status = 0
        else:
            print("ok: Z was not granted k while Y held it")
            status = 0
    except (OSError, EOFError, TimeoutError, RuntimeError, AssertionError, ValueError) as e:
        print("setup failed: %s: %s" % (type(e).__name__, e))
        status = 2
    finally:
        for p in procs:
            p.kill()
            p.wait()
        if status == 0 and not os.environ.get("FAULTS_KEEP"):
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print("logs in", tmp)
    return status


if __name__ == "__main__":
    sys.exit(main())
